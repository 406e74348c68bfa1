package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/internal/cliview"
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
	parts, err := splitPolicies(ps, partBytes)
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

// splitPolicies orders ps so that a policy comes after the one it extends
// (if that is in the file) and cuts them into JSON documents of at most
// max bytes each.
func splitPolicies(ps []policy.Policy, max int) ([]string, error) {
	var parts []string
	var cur []json.RawMessage
	size := 0
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		b, err := json.Marshal(map[string][]json.RawMessage{"policies": cur})
		if err != nil {
			return err
		}
		parts = append(parts, string(b))
		cur, size = nil, 0
		return nil
	}
	for _, i := range parentsFirst(ps) {
		b, err := json.Marshal(&ps[i])
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", ps[i].ID, err)
		}
		if len(b)+64 > max {
			return nil, fmt.Errorf("policy %s: %d bytes, more than one message", ps[i].ID, len(b))
		}
		if size+len(b)+1 > max-32 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		cur, size = append(cur, b), size+len(b)+1
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, errors.New("no policies in the file")
	}
	return parts, nil
}

// parentsFirst is the order of ps by depth of extends within the file,
// stable within a depth. A cycle is left to the cluster to refuse.
func parentsFirst(ps []policy.Policy) []int {
	byID := make(map[string]int, len(ps))
	for i := range ps {
		byID[ps[i].ID] = i
	}
	depth := make([]int, len(ps))
	for i := range ps {
		d, seen := 0, map[int]bool{i: true}
		for p, ok := byID[ps[i].Extends]; ok && !seen[p]; p, ok = byID[ps[p].Extends] {
			seen[p] = true
			d++
		}
		depth[i] = d
	}
	var order []int
	for d := 0; len(order) < len(ps); d++ {
		for i := range ps {
			if depth[i] == d {
				order = append(order, i)
			}
		}
	}
	return order
}
