package ring

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func TestNew(t *testing.T) {
	tests := []struct {
		shards  int
		wantErr bool
	}{
		{shards: 1},
		{shards: 64},
		{shards: MaxShards},
		{shards: 0, wantErr: true},
		{shards: -1, wantErr: true},
		{shards: MaxShards + 1, wantErr: true},
		{shards: math.MinInt, wantErr: true},
	}
	for _, tt := range tests {
		r, err := New(tt.shards)
		if tt.wantErr {
			if !errors.Is(err, ErrShardCount) || r != nil {
				t.Errorf("New(%d) = %v, %v; want nil, ErrShardCount", tt.shards, r, err)
			}
			continue
		}
		if err != nil || r.Shards() != tt.shards {
			t.Errorf("New(%d) = %v, %v; want %d shards", tt.shards, r, err, tt.shards)
		}
	}
}

func TestShardForDistribution(t *testing.T) {
	const shards, keys = 64, 1_000_000
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		key  func(i int) string
	}{
		{"random", func(int) string { return strconv.FormatUint(rng.Uint64(), 36) }},
		// Sequential ids are the usual real input and the usual weak hash's downfall.
		{"sequential", func(i int) string { return "tenant:" + strconv.Itoa(i) }},
	}
	r := mustNew(t, shards)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			load := make([]int, shards)
			for i := range keys {
				load[r.ShardFor(tt.key(i))]++
			}
			mean := float64(keys) / shards
			hi, lo := float64(slices.Max(load))/mean, float64(slices.Min(load))/mean
			if hi >= 1.10 || lo <= 0.90 {
				t.Errorf("max/mean = %.3f, min/mean = %.3f; want < 1.10 and > 0.90", hi, lo)
			}
		})
	}
}

func TestRangeContiguity(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shards := range []int{1, 2, 3, 7, 64, 1000, MaxShards - 1, MaxShards} {
		t.Run(strconv.Itoa(shards), func(t *testing.T) {
			r := mustNew(t, shards)
			// Ranges tile the space: start at 0, abut, end at MaxUint64,
			// and agree with ShardForHash at and just past each bound.
			var next uint64
			for i := range shards {
				lo, hi := r.Range(i)
				if lo != next || lo > hi {
					t.Fatalf("Range(%d) = [%d, %d]; want lo = %d <= hi", i, lo, hi, next)
				}
				if r.ShardForHash(lo) != i || r.ShardForHash(hi) != i {
					t.Fatalf("Range(%d) = [%d, %d]: ShardForHash gives %d, %d", i, lo, hi, r.ShardForHash(lo), r.ShardForHash(hi))
				}
				if lo > 0 && r.ShardForHash(lo-1) != i-1 {
					t.Fatalf("ShardForHash(lo-1) of shard %d = %d", i, r.ShardForHash(lo-1))
				}
				if hi < math.MaxUint64 && r.ShardForHash(hi+1) != i+1 {
					t.Fatalf("ShardForHash(hi+1) of shard %d = %d", i, r.ShardForHash(hi+1))
				}
				next = hi + 1 // wraps to 0 after the last shard
			}
			if _, hi := r.Range(shards - 1); hi != math.MaxUint64 {
				t.Fatalf("last range ends at %d; want MaxUint64", hi)
			}
			// Monotonic in h, and every hash lies in its shard's range.
			hs := []uint64{0, 1, math.MaxUint64 - 1, math.MaxUint64}
			for range 10_000 {
				hs = append(hs, rng.Uint64())
			}
			slices.Sort(hs)
			prev := 0
			for _, h := range hs {
				s := r.ShardForHash(h)
				if lo, hi := r.Range(s); s < prev || h < lo || h > hi {
					t.Fatalf("ShardForHash(%d) = %d (previous %d), range [%d, %d]", h, s, prev, lo, hi)
				}
				prev = s
			}
		})
	}
}

// TestDoublingSplits guards the property the package doc promises: doubling
// the shard count splits shard i into 2i and 2i+1.
func TestDoublingSplits(t *testing.T) {
	for _, shards := range []int{1, 3, 64, MaxShards / 2} {
		r, r2 := mustNew(t, shards), mustNew(t, 2*shards)
		for i := range shards {
			lo, hi := r.Range(i)
			lo0, _ := r2.Range(2 * i)
			_, hi1 := r2.Range(2*i + 1)
			if lo != lo0 || hi != hi1 {
				t.Fatalf("S=%d shard %d = [%d, %d]; halves span [%d, %d]", shards, i, lo, hi, lo0, hi1)
			}
		}
	}
}

func TestRangePanics(t *testing.T) {
	r := mustNew(t, 8)
	for _, shard := range []int{-1, 8} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Range(%d) did not panic", shard)
				}
			}()
			r.Range(shard)
		}()
	}
}

func FuzzShardForHash(f *testing.F) {
	f.Add(uint64(0), 1)
	f.Add(uint64(math.MaxUint64), MaxShards)
	f.Fuzz(func(t *testing.T, h uint64, shards int) {
		r, err := New(shards)
		if err != nil {
			return
		}
		s := r.ShardForHash(h)
		if lo, hi := r.Range(s); h < lo || h > hi {
			t.Fatalf("S=%d: ShardForHash(%d) = %d, range [%d, %d]", shards, h, s, lo, hi)
		}
	})
}

func BenchmarkShardFor(b *testing.B) {
	r, err := New(1024)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.ShardFor("policy:api-key:3f9a1c7e:route:/v1/orders")
	}
}

func mustNew(t testing.TB, shards int) *Ring {
	t.Helper()
	r, err := New(shards)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
