package meta

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/quorate/quorate/ring"
)

// Splitting a shard. A split gives the upper part of a shard's hash range
// to a new shard, the child, replicated by the same nodes. The record
// starts it (split-start: the child is placed but owns no keys), the meta
// leader's mover runs it (fence the range in the parent's log, copy the
// frozen state into the child's log, release it) and the record ends it
// (split-done: the child owns the range). Every check of the range is
// decided by the parent before its fence or by the child after it loaded,
// so counts stay exact; in between, the range's checks wait and retry.

// Split is a split in progress: Child takes Parent's hashes from At up.
type Split struct {
	Parent int    `json:"parent"`
	Child  int    `json:"child"`
	At     uint64 `json:"at"`
}

// MaxSplits bounds the splits in progress (every replica decides alike,
// whatever the request asked): enough to split every shard of a cluster at
// half the shard limit at once. The mover runs --max-moves of them at a
// time.
const MaxSplits = ring.MaxShards / 2

// Meta ops of splits.
const (
	OpSplitStart = "split-start" // Splits: the splits to begin (Child is assigned)
	OpSplitDone  = "split-done"  // Splits[0]: the split whose child loaded
)

// SplitOf returns the split in progress that shard s takes part in.
func (r *Record) SplitOf(s int) (Split, bool) {
	for _, sp := range r.Splits {
		if sp.Parent == s || sp.Child == s {
			return sp, true
		}
	}
	return Split{}, false
}

// SplitRange returns what a split's parent keeps and gives away.
func (r *Record) SplitRange(sp Split) (keepLo, keepHi, moveHi uint64, err error) {
	rg, err := r.Ring()
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
func (r *Record) startSplits(sps []Split) error {
	if len(sps) == 0 {
		return fmt.Errorf("split-start: no split")
	}
	if len(r.Splits)+len(sps) > MaxSplits {
		return fmt.Errorf("split-start: %d splits would be in progress, at most %d", len(r.Splits)+len(sps), MaxSplits)
	}
	if r.Shards+len(sps) > ring.MaxShards {
		return fmt.Errorf("split-start: %d shards would exceed the limit of %d", r.Shards+len(sps), ring.MaxShards)
	}
	rg, err := r.Ring()
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
		if _, busy := r.SplitOf(sp.Parent); busy {
			return fmt.Errorf("split-start: shard %d is splitting already", sp.Parent)
		}
		if _, busy := r.MoveOf(sp.Parent); busy {
			return fmt.Errorf("split-start: shard %d has a replica move in progress; split it once the move is done", sp.Parent)
		}
		if _, _, _, err := r.SplitRange(sp); err != nil {
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
func (r *Record) finishSplit(sp Split) error {
	i := slices.Index(r.Splits, sp)
	if i < 0 {
		return fmt.Errorf("split-done: no such split in progress (shard %d into %d)", sp.Parent, sp.Child)
	}
	r.Splits = slices.Delete(r.Splits, i, i+1)
	r.Bounds = append(r.Bounds, ring.Bound{Lo: sp.At, Shard: sp.Child})
	slices.SortFunc(r.Bounds, func(a, b ring.Bound) int { return cmp.Compare(a.Lo, b.Lo) })
	return nil
}

// SplitsFor turns an operator's request into splits (children
// unassigned): the shards named, or every shard that owns keys with all,
// each in the middle of its range or, for a single shard, at hash at. It
// checks what a caller can get wrong (an Error of kind Invalid); the
// record checks the rest again when the splits start.
func (r *Record) SplitsFor(shards []uint32, all bool, at uint64) ([]Split, error) {
	rg, err := r.Ring()
	if err != nil {
		return nil, err
	}
	switch {
	case all && len(shards) > 0:
		return nil, Errorf(Invalid, "shards: give shards or all, not both")
	case all:
		for _, b := range rg.Bounds() {
			shards = append(shards, uint32(b.Shard))
		}
	case len(shards) == 0:
		return nil, Errorf(Invalid, "shards: name the shards to split, or set all")
	case at != 0 && len(shards) != 1:
		return nil, Errorf(Invalid, "at: only with a single shard")
	}
	var sps []Split
	seen := map[uint32]bool{}
	for _, s := range shards {
		if seen[s] {
			return nil, Errorf(Invalid, "shards: shard %d named twice", s)
		}
		seen[s] = true
		lo, hi, ok := rg.Routed(int(s))
		if !ok {
			return nil, Errorf(Invalid, "shards: shard %d does not exist or owns no keys yet (shards: %d)", s, r.Shards)
		}
		if hi-lo < 1 {
			return nil, Errorf(Invalid, "shards: shard %d owns a single hash and cannot split", s)
		}
		x := at
		if x == 0 {
			x = lo + (hi-lo)/2 + 1
		} else if x <= lo || x > hi {
			return nil, Errorf(Invalid, "at: %#x is not inside shard %d's range [%#x, %#x] above its low bound", x, s, lo, hi)
		}
		sps = append(sps, Split{Parent: int(s), At: x})
	}
	return sps, nil
}
