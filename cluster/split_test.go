package cluster

import (
	"math"
	"slices"
	"testing"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func TestSplitRecordCommands(t *testing.T) {
	r := testRecord(3, 2, 3)
	rg, _ := r.ring()
	lo1, hi1 := rg.Range(1)
	at := lo1 + (hi1-lo1)/2 + 1

	r = step(t, r, metaCommand{Op: opSplitStart, Splits: []split{{Parent: 1, At: at}}})
	sp := split{Parent: 1, Child: 2, At: at}
	if r.Shards != 3 || !slices.Equal(r.Splits, []split{sp}) || !slices.Equal(r.Placement[2], r.Placement[1]) {
		t.Fatalf("after split-start: shards %d, splits %v, placement %v", r.Shards, r.Splits, r.Placement)
	}
	// Until the split is done the child owns nothing: the range still
	// routes to the parent.
	rg, _ = r.ring()
	if got := rg.ShardForHash(math.MaxUint64); got != 1 {
		t.Fatalf("during the split the top hash routes to %d, want the parent 1", got)
	}
	if _, _, ok := rg.Routed(2); ok {
		t.Fatal("the child owns keys before its split is done")
	}
	refused(t, r, metaCommand{Op: opSplitStart, Splits: []split{{Parent: 1, At: at + 1}}}, "splitting already")
	refused(t, r, metaCommand{Op: opMoveStart, Move: &move{Shard: 2, Add: "n1"}}, "splitting")
	refused(t, r, metaCommand{Op: opMoveStart, Move: &move{Shard: 1, Remove: "n1"}}, "splitting")
	refused(t, r, metaCommand{Op: opSplitDone, Splits: []split{{Parent: 1, Child: 2, At: at + 1}}}, "no such split")

	r = step(t, r, metaCommand{Op: opSplitDone, Splits: []split{sp}})
	rg, _ = r.ring()
	for _, c := range []struct {
		h     uint64
		shard int
	}{{0, 0}, {lo1, 1}, {at - 1, 1}, {at, 2}, {math.MaxUint64, 2}} {
		if got := rg.ShardForHash(c.h); got != c.shard {
			t.Errorf("after the split hash %#x routes to %d, want %d", c.h, got, c.shard)
		}
	}
	if len(r.Splits) != 0 {
		t.Fatalf("split still in progress: %v", r.Splits)
	}
	// A split shard splits again, inside its new range only.
	refused(t, r, metaCommand{Op: opSplitStart, Splits: []split{{Parent: 1, At: at}}}, "not inside")
	refused(t, r, metaCommand{Op: opSplitStart, Splits: []split{{Parent: 1, At: lo1}}}, "not inside")
	refused(t, r, metaCommand{Op: opSplitStart, Splits: []split{{Parent: 7, At: 5}}}, "no shard")
	refused(t, r, metaCommand{Op: opSplitStart}, "no split")
	r = step(t, r, metaCommand{Op: opSplitStart, Splits: []split{{Parent: 1, At: at - 5}, {Parent: 0, At: 1 << 20}}})
	if r.Shards != 5 || len(r.Splits) != 2 {
		t.Fatalf("two splits at once: shards %d, splits %v", r.Shards, r.Splits)
	}
}

func TestSplitsFor(t *testing.T) {
	r := testRecord(3, 4, 3)
	sps, err := splitsFor(r, &pb.SplitShardsRequest{All: true})
	if err != nil || len(sps) != 4 {
		t.Fatalf("all: %v %v", sps, err)
	}
	rg, _ := r.ring()
	for _, sp := range sps {
		lo, hi := rg.Range(sp.Parent)
		if sp.At <= lo || sp.At > hi {
			t.Errorf("shard %d splits at %#x, outside (%#x, %#x]", sp.Parent, sp.At, lo, hi)
		}
	}
	for name, req := range map[string]*pb.SplitShardsRequest{
		"nothing":       {},
		"both":          {All: true, Shards: []uint32{1}},
		"no such shard": {Shards: []uint32{4}},
		"twice":         {Shards: []uint32{1, 1}},
		"at with two":   {Shards: []uint32{1, 2}, At: 5},
		"at outside":    {Shards: []uint32{1}, At: 5},
	} {
		if _, err := splitsFor(r, req); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
