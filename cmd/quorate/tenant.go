package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
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
	ctx, cancel := context.WithTimeout(ctx, f.waitTimeout)
	defer cancel()
	var st *pb.StatusResponse
	if err := f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
		st, err = ac.Status(ctx, &pb.StatusRequest{})
		return err
	}); err != nil {
		return err
	}
	opts, _ := f.creds.dialOptions() // call checked them
	var waits []cliview.NodeWait
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range st.GetNodes() {
		if s := n.GetState(); n.GetRpcAddr() == "" || s == pb.NodeState_NODE_STATE_DEAD || s == pb.NodeState_NODE_STATE_LEFT {
			continue
		}
		wg.Go(func() {
			w := waitTenantOn(ctx, n, id, version, since, opts)
			mu.Lock()
			waits = append(waits, w)
			mu.Unlock()
		})
	}
	wg.Wait()
	if lag := cliview.Waits(a.stdout, waits); len(lag) > 0 {
		return failure(fmt.Errorf("--wait-timeout %v: assignment version %d not live on %v", f.waitTimeout, version, lag))
	}
	return nil
}

func waitTenantOn(ctx context.Context, n *pb.NodeStatus, id string, version uint64, since time.Time, opts []grpc.DialOption) cliview.NodeWait {
	w := cliview.NodeWait{ID: n.GetId()}
	c, err := client.Dial(n.GetRpcAddr(), opts...)
	if err != nil {
		w.Err = err
		return w
	}
	defer c.Close()
	ac := pb.NewAdminClient(c.Conn())
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		resp, err := ac.GetTenant(ctx, &pb.GetTenantRequest{TenantId: id})
		switch {
		case err == nil && resp.GetVersion() >= version:
			w.Live, w.Took = true, time.Since(since)
			return w
		case err == nil:
			w.Answered, w.Version, w.Err = true, resp.GetVersion(), nil
		case status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.NotFound && ctx.Err() == nil:
			w.Err = err
		}
		select {
		case <-ctx.Done():
			return w
		case <-tick.C:
		}
	}
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
