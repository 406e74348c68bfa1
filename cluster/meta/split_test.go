package meta

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// TestSplitRecordCommands: split-start places the children and routes
// nothing to them; split-done hands each child its range.
func TestSplitRecordCommands(t *testing.T) {
	r := testRecord(3, 2, 3)
	rg, _ := r.Ring()
	lo1, hi1 := rg.Range(1)
	at := lo1 + (hi1-lo1)/2 + 1

	r = step(t, r, Command{Op: OpSplitStart, Splits: []Split{{Parent: 1, At: at}}})
	sp := Split{Parent: 1, Child: 2, At: at}
	if r.Shards != 3 || !slices.Equal(r.Splits, []Split{sp}) || !slices.Equal(r.Placement[2], r.Placement[1]) {
		t.Fatalf("after split-start: shards %d, splits %v, placement %v", r.Shards, r.Splits, r.Placement)
	}
	// Until the split is done the child owns nothing: the range still
	// routes to the parent.
	rg, _ = r.Ring()
	if got := rg.ShardForHash(math.MaxUint64); got != 1 {
		t.Fatalf("during the split the top hash routes to %d, want the parent 1", got)
	}
	if _, _, ok := rg.Routed(2); ok {
		t.Fatal("the child owns keys before its split is done")
	}
	refused(t, r, Command{Op: OpSplitStart, Splits: []Split{{Parent: 1, At: at + 1}}}, "splitting already")
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: 2, Add: "n1"}}, "splitting")
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: 1, Remove: "n1"}}, "splitting")
	refused(t, r, Command{Op: OpSplitDone, Splits: []Split{{Parent: 1, Child: 2, At: at + 1}}}, "no such split")

	r = step(t, r, Command{Op: OpSplitDone, Splits: []Split{sp}})
	rg, _ = r.Ring()
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
	refused(t, r, Command{Op: OpSplitStart, Splits: []Split{{Parent: 1, At: at}}}, "not inside")
	refused(t, r, Command{Op: OpSplitStart, Splits: []Split{{Parent: 1, At: lo1}}}, "not inside")
	refused(t, r, Command{Op: OpSplitStart, Splits: []Split{{Parent: 7, At: 5}}}, "no shard")
	refused(t, r, Command{Op: OpSplitStart}, "no split")
	r = step(t, r, Command{Op: OpSplitStart, Splits: []Split{{Parent: 1, At: at - 5}, {Parent: 0, At: 1 << 20}}})
	if r.Shards != 5 || len(r.Splits) != 2 {
		t.Fatalf("two splits at once: shards %d, splits %v", r.Shards, r.Splits)
	}
}

// TestSplitsFor: an operator's request becomes splits in the middle of
// each range; what a caller can get wrong is refused as Invalid.
func TestSplitsFor(t *testing.T) {
	r := testRecord(3, 4, 3)
	sps, err := r.SplitsFor(nil, true, 0)
	if err != nil || len(sps) != 4 {
		t.Fatalf("all: %v %v", sps, err)
	}
	rg, _ := r.Ring()
	for _, sp := range sps {
		lo, hi := rg.Range(sp.Parent)
		if sp.At <= lo || sp.At > hi {
			t.Errorf("shard %d splits at %#x, outside (%#x, %#x]", sp.Parent, sp.At, lo, hi)
		}
	}
	for name, req := range map[string]struct {
		shards []uint32
		all    bool
		at     uint64
	}{
		"nothing":       {},
		"both":          {all: true, shards: []uint32{1}},
		"no such shard": {shards: []uint32{4}},
		"twice":         {shards: []uint32{1, 1}},
		"at with two":   {shards: []uint32{1, 2}, at: 5},
		"at outside":    {shards: []uint32{1}, at: 5},
	} {
		_, err := r.SplitsFor(req.shards, req.all, req.at)
		var me *Error
		if !errors.As(err, &me) || me.Kind != Invalid {
			t.Errorf("%s: %v, want an Invalid error", name, err)
		}
	}
}
