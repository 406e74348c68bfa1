package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"

	"github.com/quorate/quorate/ring"
)

// Splitting a shard. A split gives the upper part of a shard's hash range
// to a new shard, the child, replicated by the same nodes. The record
// starts it (split-start: the child is placed but owns no keys), the mover
// runs it (splitter.go: fence the range in the parent's log, copy the
// frozen state into the child's log, release it) and the record ends it
// (split-done: the child owns the range). Every check of the range is
// decided by the parent before its fence or by the child after it loaded,
// so counts stay exact; in between, the range's checks wait and retry.

// split is a split in progress: Child takes Parent's hashes from At up.
type split struct {
	Parent int    `json:"parent"`
	Child  int    `json:"child"`
	At     uint64 `json:"at"`
}

// maxSplitsBound bounds the splits in progress (every replica decides
// alike, whatever the request asked): enough to split every shard of a
// cluster at half the shard limit at once. The mover runs --max-moves of
// them at a time.
const maxSplitsBound = ring.MaxShards / 2

// Meta ops of splits.
const (
	opSplitStart = "split-start" // Splits: the splits to begin (Child is assigned)
	opSplitDone  = "split-done"  // Splits[0]: the split whose child loaded
)

// ring returns the record's routing: the uniform ranges until a shard has
// split, then the recorded bounds.
func (r *record) ring() (*ring.Ring, error) {
	if len(r.Bounds) == 0 {
		return ring.New(r.Shards)
	}
	return ring.NewSplit(r.Shards, r.Bounds)
}

// splitBoot returns the servers to bootstrap shard s with on this node: a
// child of a split in progress is a new group on its placement (every
// replica bootstraps it alike; a group with state ignores it), any other
// group none (its leader adds the node).
func (n *Node) splitBoot(rec *record, s int) []raft.Server {
	if sp, ok := rec.splitOf(s); ok && sp.Child == s {
		return n.servers(rec, rec.Placement[s])
	}
	return nil
}

// splitOf returns the split in progress that shard s takes part in.
func (r *record) splitOf(s int) (split, bool) {
	for _, sp := range r.Splits {
		if sp.Parent == s || sp.Child == s {
			return sp, true
		}
	}
	return split{}, false
}

// splitRange returns what a split's parent keeps and gives away.
func (r *record) splitRange(sp split) (keepLo, keepHi, moveHi uint64, err error) {
	rg, err := r.ring()
	if err != nil {
		return 0, 0, 0, err
	}
	lo, hi, ok := rg.Routed(sp.Parent)
	if !ok || sp.At <= lo || sp.At > hi {
		return 0, 0, 0, fmt.Errorf("split: hash %#x is not inside shard %d's range", sp.At, sp.Parent)
	}
	return lo, sp.At - 1, hi, nil
}

// startSplits records the splits asked for: each child is a new shard on
// its parent's replicas. A parent must own a range that contains At above
// its low bound, and take part in no other split or move.
func (r *record) startSplits(sps []split) error {
	if len(sps) == 0 {
		return fmt.Errorf("split-start: no split")
	}
	if len(r.Splits)+len(sps) > maxSplitsBound {
		return fmt.Errorf("split-start: %d splits would be in progress, at most %d", len(r.Splits)+len(sps), maxSplitsBound)
	}
	if r.Shards+len(sps) > ring.MaxShards {
		return fmt.Errorf("split-start: %d shards would exceed the limit of %d", r.Shards+len(sps), ring.MaxShards)
	}
	rg, err := r.ring()
	if err != nil {
		return err
	}
	if len(r.Bounds) == 0 {
		r.Bounds = rg.Bounds()
	}
	for _, sp := range sps {
		if sp.Parent < 0 || sp.Parent >= r.Shards {
			return fmt.Errorf("split-start: no shard %d", sp.Parent)
		}
		if _, busy := r.splitOf(sp.Parent); busy {
			return fmt.Errorf("split-start: shard %d is splitting already", sp.Parent)
		}
		if _, busy := r.moveOf(sp.Parent); busy {
			return fmt.Errorf("split-start: shard %d has a replica move in progress; split it once the move is done", sp.Parent)
		}
		if _, _, _, err := r.splitRange(sp); err != nil {
			return fmt.Errorf("split-start: %w", err)
		}
		sp.Child = r.Shards
		r.Shards++
		r.Placement = append(r.Placement, slices.Clone(r.Placement[sp.Parent]))
		r.Splits = append(r.Splits, sp)
	}
	return nil
}

// finishSplit routes the split's range to its child, which has loaded it.
func (r *record) finishSplit(sp split) error {
	i := slices.Index(r.Splits, sp)
	if i < 0 {
		return fmt.Errorf("split-done: no such split in progress (shard %d into %d)", sp.Parent, sp.Child)
	}
	r.Splits = slices.Delete(r.Splits, i, i+1)
	r.Bounds = append(r.Bounds, ring.Bound{Lo: sp.At, Shard: sp.Child})
	slices.SortFunc(r.Bounds, func(a, b ring.Bound) int { return cmp.Compare(a.Lo, b.Lo) })
	return nil
}

// SplitShards is Admin.SplitShards: an operator splits shards (or every
// shard) online. The splits are recorded here and run by the meta leader's
// mover.
func (s adminServer) SplitShards(ctx context.Context, req *pb.SplitShardsRequest) (*pb.SplitShardsResponse, error) {
	n := s.n
	rec := n.metaFSM.get()
	if rec == nil {
		return nil, status.Error(codes.Unavailable, "split: this node has no cluster record yet")
	}
	sps, err := splitsFor(rec, req)
	if err != nil {
		return nil, err
	}
	n.sec.audit.Info("audit: split shards", "who", security.PrincipalName(ctx), "shards", req.GetShards(), "all", req.GetAll(), "at", req.GetAt())
	after, err := n.proposeRecord(ctx, &metaCommand{Op: opSplitStart, Splits: sps, Who: security.PrincipalName(ctx)})
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
func splitsFor(rec *record, req *pb.SplitShardsRequest) ([]split, error) {
	rg, err := rec.ring()
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
	var sps []split
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
		sps = append(sps, split{Parent: int(s), At: at})
	}
	return sps, nil
}
