package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/internal/cliview"
)

// leaveStatusTimeout bounds the Status call leave makes to learn the node's
// id, so that a slow answer does not eat into --timeout.
const leaveStatusTimeout = 5 * time.Second

func (a *app) leaveCmd() *cobra.Command {
	var (
		addr    string
		timeout time.Duration
		creds   credFlags
	)
	cmd := &cobra.Command{
		Use:   "leave --addr HOST:PORT",
		Short: "Take a node out of the cluster, moving its replicas to the others first",
		Long: `Take the node at --addr out of the cluster for good. The node asks the meta
leader to mark it leaving, and the meta leader moves each of its replicas to
another node one safe step at a time: a new replica joins the shard's group as
a non-voter, is promoted to voter once it has caught up, and only then is the
leaving node's replica removed, so every group keeps its replication factor
throughout. Once none of its replicas is left the node is recorded as left and
exits by itself. The command waits for that, up to --timeout; if the time runs
out the moves go on without it, and "quorate status" shows them.

Sending SIGTERM to a node started with "quorate agent --leave-on-terminate"
does the same before it stops (up to its --leave-timeout).

Leave is refused when fewer nodes than the replication factor would remain:
add a node first. It needs a token with the admin scope.

Exit status: 0 once the node has left; 1 if it could not be asked, refused to
leave, or had not left within --timeout; 2 for bad flags.`,
		Example: `  quorate leave --addr 10.0.0.4:7401
  quorate leave --addr 10.0.0.4:7401 --timeout 30m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return usageError(errors.New("--addr: give the gRPC address of the node that should leave, e.g. --addr 10.0.0.4:7401 (there is no default: leave takes that node out of the cluster)"))
			}
			if timeout <= 0 {
				return usageError(fmt.Errorf("--timeout %v: must be positive", timeout))
			}
			c, err := creds.dial(addr)
			if err != nil {
				return err
			}
			defer c.Close()

			name := leavingNode(cmd.Context(), c, addr, min(timeout, leaveStatusTimeout))
			fmt.Fprintf(a.stderr, "asking %s to leave; waiting up to %v for its replicas to move\n", name, timeout)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := c.Leave(ctx)
			if status.Code(err) == codes.DeadlineExceeded {
				return failure(fmt.Errorf("leave: %s had not left within --timeout %v; the moves go on without this command and the node exits once they are done: \"quorate status --addr %s\" shows its membership and the moves in progress", name, timeout, addr))
			}
			if err != nil {
				return failure(cliview.RPCError(err, addr, timeout))
			}
			fmt.Fprintf(a.stdout, "%s left the cluster (record epoch %d); it stops by itself\n", name, resp.GetEpoch())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "", "gRPC address of the node that should leave (required)")
	fl.DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the node's replicas to move away")
	creds.register(fl)
	return cmd
}

// leavingNode names the node at addr for leave's messages: "node <id>" from
// its Status, or "node at <addr>" if Status does not answer (a token with
// only the admin scope may not call it; Leave reports any other trouble).
func leavingNode(ctx context.Context, c *client.Client, addr string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if resp, err := c.Status(ctx); err == nil && resp.GetNodeId() != "" {
		return "node " + resp.GetNodeId()
	}
	return "node at " + addr
}
