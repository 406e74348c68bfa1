package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/internal/policysplit"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// partBytes bounds one part of a file too large for one message: a
// node's default --max-recv-msg-size with room for the rest of the call.
const partBytes = 3 << 20

// maxLargeDocument bounds what apply reads at all (a million small
// policies is about 150 MB).
const maxLargeDocument = 512 << 20

// applyAnswerBytes lets an apply's answer name every policy of a large
// change (a pruning apply that removes 300,000 names each: a few MB).
var applyAnswerBytes = grpc.MaxCallRecvMsgSize(64 << 20)

// policyApplyLarge applies a file larger than one message as consecutive
// applies of parts, parents before the policies that extend them. Each
// part is a version of its own: in between, checks see the set with the
// parts applied so far. A refused part stops the apply; the parts before
// it stay applied.
func (a *app) policyApplyLarge(ctx context.Context, f *applyFlags, size int64) error {
	if f.prune {
		return usageError(fmt.Errorf("--prune: -f %s is %d bytes, more than one message (%d), and a pruning apply must be one: apply it without --prune, then delete what it does not name", f.file, size, maxDocument))
	}
	if size > maxLargeDocument {
		return usageError(fmt.Errorf("-f %s: %d bytes, more than %d", f.file, size, maxLargeDocument))
	}
	data, err := os.ReadFile(f.file)
	if err != nil {
		return usageError(fmt.Errorf("-f: %w", err))
	}
	ps, err := policy.Parse(f.file, data)
	if err != nil {
		return failure(err)
	}
	parts, err := policysplit.Split(ps, partBytes)
	if err != nil {
		return failure(err)
	}
	fmt.Fprintf(a.stdout, "%s: %d policies, %d bytes: more than one message, applied in %d parts, each a version of its own\n", f.file, len(ps), size, len(parts))
	if f.dryRun {
		fmt.Fprintln(a.stdout, "dry run: the file parses; each part is validated by the cluster when it is applied; nothing applied")
		return nil
	}
	var last uint64
	var added, changed int
	start := time.Now()
	for i, doc := range parts {
		var resp *pb.ApplyPoliciesResponse
		err := f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
			resp, err = ac.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: doc, SourceName: fmt.Sprintf("%s (part %d of %d)", f.file, i+1, len(parts))}, applyAnswerBytes)
			return err
		})
		if err != nil {
			return fmt.Errorf("part %d of %d refused; parts 1 to %d are applied (version %d): %w", i+1, len(parts), i, last, err)
		}
		last = resp.GetVersion()
		added, changed = added+len(resp.GetAdded()), changed+len(resp.GetChanged())
		fmt.Fprintf(a.stdout, "part %d of %d: %d added, %d changed, version %d (%s)\n", i+1, len(parts), len(resp.GetAdded()), len(resp.GetChanged()), last, time.Since(start).Round(time.Millisecond))
		cliview.Warnings(a.stdout, resp)
	}
	fmt.Fprintf(a.stdout, "applied %d policies (%d added, %d changed) in %s, version %d\n", len(ps), added, changed, time.Since(start).Round(time.Millisecond), last)
	if !f.wait {
		return nil
	}
	return a.waitLive(ctx, f, last, time.Now())
}
