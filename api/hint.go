package api

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// hintLeaders tells a gRPC caller of a strict check which shards of its
// items this node decided without leading them (it forwarded them), and
// their leaders, in the pb.LeaderHintHeader response header. A routing
// client then sends the next check of those shards to the leader itself.
// Nothing is set when this node led every shard, which is the common case
// for a routing client; the cost otherwise is one header.
func hintLeaders(ctx context.Context, n Node, resp *pb.CheckResponse) {
	shards := make([]int, 0, 1)
	for _, r := range resp.GetResults() {
		shards = append(shards, int(r.GetShard()))
	}
	slices.Sort(shards)
	var hints []string
	for _, s := range slices.Compact(shards) {
		if l := n.LeaderOf(s); l != n.NodeID() {
			hints = append(hints, pb.FormatLeaderHint(s, l))
		}
	}
	if len(hints) > 0 {
		_ = grpc.SetHeader(ctx, metadata.MD{pb.LeaderHintHeader: hints}) // fails only outside a gRPC call
	}
}
