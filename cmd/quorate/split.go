package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func (a *app) splitCmd() *cobra.Command {
	var (
		shards []uint
		all    bool
		at     uint64
		f      adminFlags
	)
	cmd := &cobra.Command{
		Use:   "split (--shard N ... | --all)",
		Short: "Split shards online: each gives half its keys to a new shard",
		Long: `Split shards while the cluster serves. Each shard named by --shard (or every
shard, with --all, which doubles the shard count) gives the upper half of its
hash range to a new shard replicated by the same nodes, with every bucket,
lease and idempotency record of that half: no count is reset and no check is
decided twice. The new shards' replicas may then move to other nodes like any
others.

While a shard splits, checks of the half that moves wait (within their
deadline) for the copy to finish, typically well under a second, and are then
decided by the new shard; the other half is not disturbed. The command returns
once the splits are recorded; "quorate status" shows them in progress.

--at gives the hash where the new shard's range starts (one shard only; the
default is the middle of its range). --addr is any node of the cluster. It
needs a token with the admin scope.

Exit status: 0 once the splits are recorded; 1 if they could not be asked or
were refused; 2 for bad flags.`,
		Example: `  quorate split --shard 3
  quorate split --all --addr 10.0.0.1:7401`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case all && len(shards) > 0:
				return usageError(errors.New("--shard, --all: give one or the other"))
			case !all && len(shards) == 0:
				return usageError(errors.New("--shard: name a shard to split (e.g. --shard 3), or use --all"))
			case at != 0 && len(shards) != 1:
				return usageError(errors.New("--at: only with a single --shard"))
			}
			req := &pb.SplitShardsRequest{All: all, At: at}
			for _, s := range shards {
				if s >= ring.MaxShards {
					return usageError(fmt.Errorf("--shard: %d is not a shard (shards are numbered from 0 to at most %d)", s, ring.MaxShards-1))
				}
				req.Shards = append(req.Shards, uint32(s))
			}
			return f.call(cmd.Context(), func(ctx context.Context, c pb.AdminClient) error {
				resp, err := c.SplitShards(ctx, req)
				if err != nil {
					return err
				}
				for _, sp := range resp.GetSplits() {
					fmt.Fprintf(a.stdout, "shard %d splits at %#016x: shard %d takes the keys from there up\n", sp.GetParent(), sp.GetAt(), sp.GetChild())
				}
				fmt.Fprintf(a.stdout, "%d split(s) recorded (record epoch %d); \"quorate status\" shows them until they are done\n", len(resp.GetSplits()), resp.GetEpoch())
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.UintSliceVar(&shards, "shard", nil, "shard to split (repeatable, or comma-separated)")
	fl.BoolVar(&all, "all", false, "split every shard (doubles the shard count)")
	fl.Uint64Var(&at, "at", 0, "hash where the new shard's range starts (default: the middle of the range)")
	f.register(fl)
	return cmd
}
