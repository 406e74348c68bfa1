package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/internal/cliview"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

type tailFlags struct {
	f        adminFlags
	req      pb.TailDecisionsRequest
	node     string
	asJSON   bool
	duration time.Duration
	max      int
}

func (a *app) tailCmd() *cobra.Command {
	var f tailFlags
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Follow the decision log of every node, live",
		Long: `Follow the decision log as the nodes write it: every deny, shadow would-deny
and fail-open, and the sampled allows (--decision-log-allows on the agents),
of every node the one at --addr knows, or of --node only. Filters narrow it
down; each line shows the time, node, decision, reason, deciding policy,
tenant and request id (--json prints the log's own JSON lines).

A tail that falls behind loses lines, and says how many. It needs an admin
token: the log names tenants, keys and addresses. It runs until Ctrl-C, for
--for, or until --max lines were printed.

Exit status: 0 when it ended as asked, 1 if no node could be followed, 2 for bad flags.`,
		Example: `  quorate tail --decision DENY
  quorate tail --policy plan_free --tenant t_44 --json --for 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return usageError(err)
			}
			return a.tail(cmd.Context(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.req.Policy, "policy", "", "only records this policy decided or evaluated")
	fl.StringVar(&f.req.TenantId, "tenant", "", "only this tenant_id's records")
	fl.StringVar(&f.req.Decision, "decision", "", "only ALLOW, DENY or THROTTLE")
	fl.StringVar(&f.node, "node", "", "only this node's log (default: every node's)")
	fl.BoolVar(&f.asJSON, "json", false, "print the log's JSON lines as they are")
	fl.DurationVar(&f.duration, "for", 0, "stop after this long (0: until Ctrl-C)")
	fl.IntVar(&f.max, "max", 0, "stop after this many lines (0: no limit)")
	f.f.register(fl)
	return cmd
}

func (f *tailFlags) check() error {
	switch d := strings.ToUpper(f.req.Decision); {
	case d != "" && d != "ALLOW" && d != "DENY" && d != "THROTTLE":
		return fmt.Errorf("--decision %q: want ALLOW, DENY or THROTTLE", f.req.Decision)
	case f.duration < 0:
		return fmt.Errorf("--for %v: must not be negative", f.duration)
	case f.max < 0:
		return fmt.Errorf("--max %d: must not be negative", f.max)
	}
	return nil
}

// tail finds the nodes from --addr's status and follows each one's log.
func (a *app) tail(ctx context.Context, f *tailFlags) error {
	var st *pb.StatusResponse
	if err := f.f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
		st, err = ac.Status(ctx, &pb.StatusRequest{})
		return err
	}); err != nil {
		return err
	}
	var addrs []string
	for _, n := range st.GetNodes() {
		if n.GetRpcAddr() != "" && (f.node == "" || f.node == n.GetId()) && n.GetState() == pb.NodeState_NODE_STATE_ALIVE {
			addrs = append(addrs, n.GetRpcAddr())
		}
	}
	if len(addrs) == 0 {
		return failure(fmt.Errorf("no alive node to follow (--node %q)", f.node))
	}
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	out := &cliview.Tail{W: a.stdout, JSON: f.asJSON, Max: f.max, Done: stop}
	var wg sync.WaitGroup
	errs := make([]error, len(addrs))
	for i, addr := range addrs {
		wg.Go(func() { errs[i] = f.follow(ctx, addr, out) })
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			fmt.Fprintf(a.stderr, "quorate tail: %v\n", err)
		}
	}
	if failed == len(addrs) {
		return failure(errors.New("no node could be followed"))
	}
	return nil
}

// follow prints one node's tail until ctx ends.
func (f *tailFlags) follow(ctx context.Context, addr string, out *cliview.Tail) error {
	c, err := f.f.creds.dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stream, err := pb.NewAdminClient(c.Conn()).TailDecisions(ctx, &f.req)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	var lost uint64
	for {
		m, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: %w", addr, err)
		}
		if d := m.GetDropped(); d > lost {
			out.Lost(addr, d-lost)
			lost = d
		}
		out.Line(m.GetRecord())
	}
}
