package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/internal/cliview"
)

func (a *app) statusCmd() *cobra.Command {
	var (
		addr    string
		timeout time.Duration
		asJSON  bool
		creds   credFlags
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's nodes and shards as one node sees them",
		Long: `Show the cluster as the node at --addr sees it: the cluster record's epoch
and replication factor, every known node with its gossip state (alive,
suspect, dead) and its membership in the record (active, leaving, left,
removed; - for a node gossip knows but the record does not), the replica
moves in progress, and every shard that node hosts a replica of, with the
shard's leader, replicas, Raft term, applied index and when the node last
heard from the leader.

Exit status: 0 on success, 1 if the node could not be asked, 2 for bad flags.`,
		Example: `  quorate status --addr 127.0.0.1:7401`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usageError(fmt.Errorf("--timeout %v: must be positive", timeout))
			}
			c, err := creds.dial(addr)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := c.Status(ctx)
			if err != nil {
				return failure(cliview.RPCError(err, addr, timeout))
			}
			if asJSON {
				if err := cliview.StatusJSON(a.stdout, resp); err != nil {
					return failure(err)
				}
				return nil
			}
			cliview.Status(a.stdout, resp, time.Now())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:7401", "gRPC address of the node to ask")
	fl.DurationVar(&timeout, "timeout", 2*time.Second, "deadline of the call")
	fl.BoolVar(&asJSON, "json", false, "print the response as JSON (protojson)")
	creds.register(fl)
	return cmd
}
