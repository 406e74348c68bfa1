package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/policy/tenants"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

type tenantImportFlags struct {
	tenantWaitFlags
	chunk    int
	dryRun   bool
	progress time.Duration
}

func (a *app) tenantImportCmd() *cobra.Command {
	var f tenantImportFlags
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Put the tenants of a CSV or JSON lines file on their plans",
		Long: `Import a file of assignments: CSV lines tenant_id,plan (an optional first
line "tenant_id,plan", # comments) or JSON lines {"tenant_id": "t_1", "plan":
"PRO"}; the first non-blank character says which ('{': JSON lines).

The whole file is read and checked first: if any line is refused, the lines
are printed with their numbers and nothing is sent. Then it is read again and
sent in chunks of --chunk assignments (at most 5000, and 192 KiB), each
applied whole by the meta group, in file order: a tenant listed twice ends on
its last plan. Progress goes to stderr every --progress. A chunk whose outcome
is unknown (no meta leader, a timeout) is sent again, up to three times:
setting a plan twice changes nothing. A chunk the cluster refuses (the
10,000,000 tenant bound) stops the import: the chunks before it are applied,
and the error says which lines. Importing the same file again is harmless.

Tenants the file does not name keep their plans (quorate tenant delete
removes them).

Exit status: 0 imported (and live everywhere with --wait), 1 refused lines
or chunk, or not live in time, 2 bad flags or unreadable file.`,
		Example: `  quorate tenant import tenants.csv
  quorate tenant import tenants.jsonl --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.tenantImport(cmd.Context(), &f, args[0]) },
	}
	cmd.Flags().IntVar(&f.chunk, "chunk", meta.MaxTenantChange, "assignments a chunk (1..5000)")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "check the file only; send nothing")
	cmd.Flags().DurationVar(&f.progress, "progress", 2*time.Second, "how often to report progress on stderr")
	f.registerWait(cmd)
	return cmd
}

func (a *app) tenantImport(ctx context.Context, f *tenantImportFlags, file string) error {
	if f.chunk < 1 || f.chunk > meta.MaxTenantChange {
		return usageError(fmt.Errorf("--chunk %d: must be between 1 and %d", f.chunk, meta.MaxTenantChange))
	}
	im, bad, err := readAssignments(file, 20)
	switch {
	case err != nil:
		return usageError(err)
	case len(bad) > 0:
		for _, b := range bad {
			fmt.Fprintln(a.stderr, b)
		}
		return failure(fmt.Errorf("%s: lines refused (above); nothing was imported", file))
	case im.Assignments == 0:
		return usageError(fmt.Errorf("%s: no assignments", file))
	case f.dryRun:
		fmt.Fprintf(a.stdout, "%s: %d assignments on %d lines, all valid; dry run: nothing sent\n", file, im.Assignments, im.Lines)
		return nil
	}
	c, err := f.creds.dial(f.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	last, err := a.sendChunks(ctx, f, pb.NewAdminClient(c.Conn()), &im)
	if err != nil {
		return err
	}
	cliview.ImportDone(a.stdout, im)
	return a.waitTenant(ctx, &f.tenantWaitFlags, last, im.Version, time.Now())
}

// sendChunks sends the file a chunk at a time, keeping im's counts, and
// returns a tenant of the last chunk (to wait for).
func (a *app) sendChunks(ctx context.Context, f *tenantImportFlags, ac pb.AdminClient, im *cliview.Import) (string, error) {
	fh, err := os.Open(im.File)
	if err != nil {
		return "", usageError(err)
	}
	defer fh.Close()
	start, reported, first, lastID := time.Now(), time.Now(), 1, ""
	err = tenants.Chunks(tenants.NewReader(fh), f.chunk, meta.MaxTenantChangeBytes, func(chunk []tenants.Assignment, lastLine int) error {
		resp, retries, err := setChunk(ctx, ac, chunk, f.timeout)
		if err != nil {
			return failure(fmt.Errorf("%s: chunk %d (lines %d..%d) refused: %v; lines 1..%d were imported, none after (importing the file again is harmless)",
				im.File, im.Chunks+1, first, lastLine, cliview.RPCError(err, f.addr, f.timeout), first-1))
		}
		im.Sent, im.Chunks, im.Retries = im.Sent+len(chunk), im.Chunks+1, im.Retries+retries
		im.Set, im.Unchanged = im.Set+int(resp.GetSet()), im.Unchanged+int(resp.GetUnchanged())
		im.Version, im.Tenants, im.Took = resp.GetVersion(), resp.GetTenants(), time.Since(start)
		first, lastID = lastLine+1, chunk[0].TenantID
		if time.Since(reported) >= f.progress {
			cliview.ImportProgress(a.stderr, *im)
			reported = time.Now()
		}
		return nil
	})
	if _, ok := errors.AsType[*tenants.LineError](err); ok {
		// The file changed since it was checked.
		return "", failure(fmt.Errorf("%s:%v; lines 1..%d were imported, none after", im.File, err, first-1))
	}
	return lastID, err
}

// setChunk sends one chunk, again (up to three times) while its outcome
// is unknown: a set is idempotent.
func setChunk(ctx context.Context, ac pb.AdminClient, chunk []tenants.Assignment, timeout time.Duration) (*pb.SetTenantsResponse, int, error) {
	req := &pb.SetTenantsRequest{Assignments: make([]*pb.TenantAssignment, len(chunk))}
	for i, x := range chunk {
		req.Assignments[i] = &pb.TenantAssignment{TenantId: x.TenantID, Plan: x.Plan}
	}
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := ac.SetTenants(cctx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return resp, attempt, nil
		case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown:
			if attempt < 3 && sleep(ctx, time.Duration(attempt+1)*500*time.Millisecond) {
				continue
			}
		}
		return nil, attempt, err
	}
}

// sleep waits d, false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
