package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/policy/tenants"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func (a *app) tenantCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Put tenants on plans, one at a time or from a file",
		Long: `The tenant assignment says which plan each tenant is on, so that a check
naming its tenant_id without a tenant_tier is decided by its plan. A plan is
a tier value (PRO: what a plan policy's scope names as tenant_tier) or a plan
policy's id (plan_pro: the tier its scope names). The assignment is
replicated like the policy set, with a version of its own.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.tenantSetCmd(), a.tenantGetCmd(), a.tenantDeleteCmd(), a.tenantListCmd(), a.tenantImportCmd())
	return cmd
}

type tenantWaitFlags struct {
	adminFlags
	wait        bool
	waitTimeout time.Duration
}

func (f *tenantWaitFlags) registerWait(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.wait, "wait", true, "wait until every node resolves with the change, and say how long each took")
	cmd.Flags().DurationVar(&f.waitTimeout, "wait-timeout", 10*time.Second, "how long --wait waits")
	f.register(cmd.Flags())
}

func (a *app) tenantSetCmd() *cobra.Command {
	var (
		f    tenantWaitFlags
		plan string
	)
	cmd := &cobra.Command{
		Use:   "set TENANT_ID --plan PLAN",
		Short: "Put one tenant on a plan",
		Example: `  quorate tenant set t_1 --plan PRO
  quorate tenant set t_1 --plan plan_enterprise`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *pb.SetTenantsResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.SetTenants(ctx, &pb.SetTenantsRequest{Assignments: []*pb.TenantAssignment{{TenantId: args[0], Plan: plan}}})
				return err
			})
			if err != nil {
				return err
			}
			cliview.TenantSet(a.stdout, args[0], plan, resp)
			return a.waitTenant(cmd.Context(), &f, args[0], resp.GetVersion(), time.Now())
		},
	}
	cmd.Flags().StringVar(&plan, "plan", "", "the plan: a tier (PRO) or a plan policy's id (plan_pro) (required)")
	_ = cmd.MarkFlagRequired("plan")
	f.registerWait(cmd)
	return cmd
}

func (a *app) tenantGetCmd() *cobra.Command {
	var (
		f adminFlags
		o outputFlag
	)
	cmd := &cobra.Command{
		Use:   "get TENANT_ID",
		Short: "Print a tenant's plan and the tier it means",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check("text", "json"); err != nil {
				return err
			}
			var resp *pb.GetTenantResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.GetTenant(ctx, &pb.GetTenantRequest{TenantId: args[0]})
				return err
			})
			switch {
			case err != nil:
				return err
			case o.output == "json":
				return cliview.TenantJSON(a.stdout, resp)
			}
			cliview.Tenant(a.stdout, resp)
			return nil
		},
	}
	o.register(cmd.Flags(), "text", "text", "json")
	f.register(cmd.Flags())
	return cmd
}

func (a *app) tenantDeleteCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "delete TENANT_ID...",
		Short: "Remove tenants' assignments: their checks use the tenant_tier they send again",
		Args:  cobra.RangeArgs(1, meta.MaxTenantChange),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *pb.DeleteTenantsResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.DeleteTenants(ctx, &pb.DeleteTenantsRequest{TenantIds: args})
				return err
			})
			if err != nil {
				return err
			}
			cliview.TenantsDeleted(a.stdout, resp)
			return nil
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func (a *app) tenantListCmd() *cobra.Command {
	var (
		f           adminFlags
		o           outputFlag
		limit       uint32
		after, plan string
	)
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List tenants and their plans, in id order, a page at a time",
		Example: `  quorate tenant list --limit 20 --plan PRO`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check("table", "json"); err != nil {
				return err
			}
			var resp *pb.ListTenantsResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.ListTenants(ctx, &pb.ListTenantsRequest{After: after, Limit: limit, Plan: plan})
				return err
			})
			switch {
			case err != nil:
				return err
			case o.output == "json":
				return cliview.TenantsJSON(a.stdout, resp)
			}
			return cliview.Tenants(a.stdout, resp)
		},
	}
	cmd.Flags().Uint32Var(&limit, "limit", 100, "tenants a page (at most 10000)")
	cmd.Flags().StringVar(&after, "after", "", "list the tenants after this id (the last one of the previous page)")
	cmd.Flags().StringVar(&plan, "plan", "", "only the tenants on this plan")
	o.register(cmd.Flags(), "table", "table", "json")
	f.register(cmd.Flags())
	return cmd
}

// waitTenant waits until every node --addr knows of answers for tenant id
// from assignment version or later, and says how long each took after
// since.
func (a *app) waitTenant(ctx context.Context, f *tenantWaitFlags, id string, version uint64, since time.Time) error {
	if !f.wait {
		return nil
	}
	if f.waitTimeout <= 0 {
		return usageError(fmt.Errorf("--wait-timeout %v: must be positive", f.waitTimeout))
	}
	lag, err := a.waitVersion(ctx, &f.adminFlags, f.waitTimeout, tenantVersion(id), version, since)
	if err != nil {
		return err
	}
	if len(lag) > 0 {
		return failure(fmt.Errorf("--wait-timeout %v: assignment version %d not live on %v", f.waitTimeout, version, lag))
	}
	return nil
}

// readAssignments checks a whole file before anything is sent: the
// assignments it holds and the lines refused, the first maxShown of them
// written out.
func readAssignments(file string, maxShown int) (cliview.Import, []string, error) {
	im := cliview.Import{File: file}
	fh, err := os.Open(file)
	if err != nil {
		return im, nil, err
	}
	defer fh.Close()
	r := tenants.NewReader(fh)
	var bad []string
	refused := 0
	for {
		_, line, err := r.Next()
		var le *tenants.LineError
		switch {
		case errors.Is(err, io.EOF):
			if refused > maxShown {
				bad = append(bad, fmt.Sprintf("... and %d more lines refused", refused-maxShown))
			}
			return im, bad, nil
		case errors.As(err, &le):
			if refused++; refused <= maxShown {
				bad = append(bad, fmt.Sprintf("%s:%d: %v", file, le.Line, le.Err))
			}
		case err != nil:
			return im, nil, err
		default:
			im.Assignments++
		}
		im.Lines = max(im.Lines, line)
	}
}
