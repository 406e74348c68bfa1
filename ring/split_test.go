package ring

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestNewSplitMatchesUniform(t *testing.T) {
	u, _ := New(7)
	s, err := NewSplit(7, u.Bounds())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		h := rng.Uint64()
		if a, b := u.ShardForHash(h), s.ShardForHash(h); a != b {
			t.Fatalf("hash %#x: uniform %d, table %d", h, a, b)
		}
	}
	for sh := range 7 {
		lo, hi := u.Range(sh)
		lo2, hi2, ok := s.Routed(sh)
		if !ok || lo != lo2 || hi != hi2 {
			t.Fatalf("shard %d: uniform [%#x, %#x], table [%#x, %#x] %v", sh, lo, hi, lo2, hi2, ok)
		}
		for _, h := range []uint64{lo, hi} {
			if got := s.ShardForHash(h); got != sh {
				t.Fatalf("bound %#x of shard %d routes to %d", h, sh, got)
			}
		}
	}
}

func TestNewSplitRoutesTheUpperPart(t *testing.T) {
	u, _ := New(2)
	lo, hi := u.Range(1)
	at := lo + (hi-lo)/2
	b := append(u.Bounds(), Bound{Lo: at, Shard: 2})
	s, err := NewSplit(3, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		h     uint64
		shard int
	}{{0, 0}, {lo - 1, 0}, {lo, 1}, {at - 1, 1}, {at, 2}, {math.MaxUint64, 2}} {
		if got := s.ShardForHash(c.h); got != c.shard {
			t.Errorf("hash %#x routes to %d, want %d", c.h, got, c.shard)
		}
	}
	if l, h, ok := s.Routed(1); !ok || l != lo || h != at-1 {
		t.Errorf("shard 1 owns [%#x, %#x] %v, want [%#x, %#x]", l, h, ok, lo, at-1)
	}
	// A shard being filled exists but owns nothing.
	s2, err := NewSplit(3, u.Bounds())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s2.Routed(2); ok || s2.Shards() != 3 {
		t.Errorf("unrouted shard 2: routed %v, shards %d", ok, s2.Shards())
	}
}

func TestNewSplitRefusesBadTables(t *testing.T) {
	for name, b := range map[string][]Bound{
		"empty":        nil,
		"not from 0":   {{Lo: 5, Shard: 0}},
		"shard twice":  {{Lo: 0, Shard: 0}, {Lo: 9, Shard: 0}},
		"same low":     {{Lo: 0, Shard: 0}, {Lo: 0, Shard: 1}},
		"out of range": {{Lo: 0, Shard: 0}, {Lo: 9, Shard: 3}},
	} {
		if _, err := NewSplit(2, b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
