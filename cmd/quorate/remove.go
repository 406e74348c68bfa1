package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func (a *app) removeCmd() *cobra.Command {
	var (
		node string
		f    adminFlags
	)
	cmd := &cobra.Command{
		Use:   "remove --node ID",
		Short: "Replace a node that is down for good, rebuilding its replicas on the others",
		Long: `Replace the node --node, which must be down for good (a dead machine, a lost
disk): the meta leader marks it removed and moves each of its replicas to
another node, rebuilt from the group's surviving majority. A cluster does this
by itself once gossip has reported the node dead for --dead-node-grace, but
only while the other nodes can hold every shard's replicas; remove does it
whatever the count, so a three-node cluster can replace a node that lost its
disk (its groups then run on two replicas until the node joins again).

Once its replicas have moved, the node may join again under its old id with an
empty --data directory. A removed node that comes back with its old data stops
and says so.

The node must not be alive (stop it first; to take a live node out, use
"quorate leave"). --addr is any node of the cluster. It needs a token with the
admin scope.

Exit status: 0 once the removal is recorded; 1 if it could not be asked or
refused; 2 for bad flags.`,
		Example: `  quorate remove --node n3
  quorate remove --node n3 --addr 10.0.0.1:7401`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				return usageError(errors.New("--node: give the id of the node to replace, e.g. --node n3"))
			}
			return f.call(cmd.Context(), func(ctx context.Context, c pb.AdminClient) error {
				resp, err := c.RemoveNode(ctx, &pb.RemoveNodeRequest{NodeId: node})
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "node %s removed (record epoch %d): its replicas are moving to the other nodes; \"quorate status\" shows the moves\n", node, resp.GetEpoch())
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&node, "node", "", "id of the node to replace (required)")
	f.register(fl)
	return cmd
}
