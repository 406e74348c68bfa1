package cluster

import (
	"context"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// Splitting a shard (meta/split.go has the record's side): the splits an
// operator asks for (SplitShards), and the groups a split's child opens
// with. The mover runs them (splitter.go).

// splitBoot returns the servers to bootstrap shard s with on this node: a
// child of a split in progress is a new group on its placement (every
// replica bootstraps it alike; a group with state ignores it), any other
// group none (its leader adds the node).
func (n *Node) splitBoot(rec *meta.Record, s int) []raft.Server {
	if sp, ok := rec.SplitOf(s); ok && sp.Child == s {
		return n.servers(rec, rec.Placement[s])
	}
	return nil
}

// SplitShards is Admin.SplitShards: an operator splits shards (or every
// shard) online. The splits are recorded here and run by the meta leader's
// mover.
func (s adminServer) SplitShards(ctx context.Context, req *pb.SplitShardsRequest) (*pb.SplitShardsResponse, error) {
	n := s.n
	rec := n.metaFSM.Record()
	if rec == nil {
		return nil, status.Error(codes.Unavailable, "split: this node has no cluster record yet")
	}
	sps, err := splitsFor(rec, req)
	if err != nil {
		return nil, err
	}
	n.sec.audit.Info("audit: split shards", "who", security.PrincipalName(ctx), "shards", req.GetShards(), "all", req.GetAll(), "at", req.GetAt())
	after, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpSplitStart, Splits: sps, Who: security.PrincipalName(ctx)})
	if err != nil {
		if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
			return nil, err
		}
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	n.metrics.splits.WithLabelValues("started").Add(float64(len(sps)))
	resp := &pb.SplitShardsResponse{Epoch: after.Epoch}
	for _, sp := range after.Splits[len(after.Splits)-len(sps):] {
		resp.Splits = append(resp.Splits, &pb.SplitShardsResponse_Split{Parent: uint32(sp.Parent), Child: uint32(sp.Child), At: sp.At})
	}
	n.log.Info("shard splits recorded", "splits", len(sps), "epoch", after.Epoch)
	return resp, nil
}

// splitsFor turns a request into splits (children unassigned), checking
// what the caller can get wrong: the record checks the rest again.
func splitsFor(rec *meta.Record, req *pb.SplitShardsRequest) ([]meta.Split, error) {
	rg, err := rec.Ring()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	shards := req.GetShards()
	switch {
	case req.GetAll() && len(shards) > 0:
		return nil, status.Error(codes.InvalidArgument, "shards: give shards or all, not both")
	case req.GetAll():
		for _, b := range rg.Bounds() {
			shards = append(shards, uint32(b.Shard))
		}
	case len(shards) == 0:
		return nil, status.Error(codes.InvalidArgument, "shards: name the shards to split, or set all")
	case req.GetAt() != 0 && len(shards) != 1:
		return nil, status.Error(codes.InvalidArgument, "at: only with a single shard")
	}
	var sps []meta.Split
	seen := map[uint32]bool{}
	for _, s := range shards {
		if seen[s] {
			return nil, status.Errorf(codes.InvalidArgument, "shards: shard %d named twice", s)
		}
		seen[s] = true
		lo, hi, ok := rg.Routed(int(s))
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "shards: shard %d does not exist or owns no keys yet (shards: %d)", s, rec.Shards)
		}
		if hi-lo < 1 {
			return nil, status.Errorf(codes.InvalidArgument, "shards: shard %d owns a single hash and cannot split", s)
		}
		at := req.GetAt()
		if at == 0 {
			at = lo + (hi-lo)/2 + 1
		} else if at <= lo || at > hi {
			return nil, status.Errorf(codes.InvalidArgument, "at: %#x is not inside shard %d's range [%#x, %#x] above its low bound", at, s, lo, hi)
		}
		sps = append(sps, meta.Split{Parent: int(s), At: at})
	}
	return sps, nil
}
