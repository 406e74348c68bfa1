package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/internal/cliview"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func (a *app) policyHistoryCmd() *cobra.Command {
	var (
		f      adminFlags
		limit  uint32
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List the versions of the policy set: who made each, when, and what it changed",
		Long: `List the versions of the policy set, newest first: who made each (the
token's name), when, the operation and what it changed. The cluster keeps
the last 100 versions and at most 500,000 changed policies over them;
older versions fall off, and the list says so.`,
		Example: `  quorate policy history
  quorate policy history --limit 5 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *pb.PolicyHistoryResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.PolicyHistory(ctx, &pb.PolicyHistoryRequest{Limit: limit})
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return viewError(cliview.HistoryJSON(a.stdout, resp))
			}
			return viewError(cliview.History(a.stdout, resp))
		},
	}
	cmd.Flags().Uint32Var(&limit, "limit", 20, "the newest versions to list (0: every one kept)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the answer of GET /v1/admin/policies/history")
	f.register(cmd.Flags())
	return cmd
}

func (a *app) policyDiffCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "diff A [B]",
		Short: "Show how the policy set changed from version A to version B (default: the current one)",
		Example: `  quorate policy diff 3 5
  quorate policy diff 3`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &pb.PolicyDiffRequest{}
			var err error
			if req.From, err = versionArg("A", args[0]); err != nil {
				return err
			}
			if len(args) == 2 {
				if req.To, err = versionArg("B", args[1]); err != nil {
					return err
				}
			}
			var resp *pb.PolicyDiffResponse
			err = f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.PolicyDiff(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			cliview.Diff(a.stdout, resp)
			return nil
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// versionArg reads a policy version argument.
func versionArg(name, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, usageError(fmt.Errorf("%s %q: want a policy version (1, 2, ...; quorate policy history lists them)", name, s))
	}
	return v, nil
}

func (a *app) policyRollbackCmd() *cobra.Command {
	var (
		f  applyFlags
		to uint64
	)
	cmd := &cobra.Command{
		Use:   "rollback --to N",
		Short: "Make the policies what they were at version N, as a new version",
		Long: `Make the policies and the extraction what they were at version N (quorate
policy history lists the versions kept). The rollback is validated as an
apply and becomes a new version ("rollback to N" in the history); emergency
blocks stay as they are. Prints the diff, then waits until every node
decides with the new version (--wait=false to skip).

Exit status: 0 rolled back (and live everywhere with --wait), 1 refused or
not live in time, 2 bad flags.`,
		Example: `  quorate policy rollback --to 3 --dry-run
  quorate policy rollback --to 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.policyRollback(cmd.Context(), &f, to) },
	}
	fl := cmd.Flags()
	fl.Uint64Var(&to, "to", 0, "the version to restore (required)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the diff only")
	fl.BoolVar(&f.wait, "wait", true, "wait until every node decides with the new version, and say how long each took")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", 10*time.Second, "how long --wait waits")
	f.register(fl)
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func (a *app) policyRollback(ctx context.Context, f *applyFlags, to uint64) error {
	switch {
	case to == 0:
		return usageError(fmt.Errorf("--to 0: want a policy version (1, 2, ...; quorate policy history lists them)"))
	case f.wait && f.waitTimeout <= 0:
		return usageError(fmt.Errorf("--wait-timeout %v: must be positive", f.waitTimeout))
	}
	var resp *pb.ApplyPoliciesResponse
	err := f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
		resp, err = ac.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{To: to, DryRun: f.dryRun})
		return err
	})
	if err != nil {
		return err
	}
	applied := time.Now()
	cliview.Changes(a.stdout, resp)
	if !resp.GetApplied() || !f.wait {
		return nil
	}
	return a.waitLive(ctx, f, resp.GetVersion(), applied)
}
