package topk

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// The hot path: one Observe per decided policy of every check. Time moves
// 1µs per observation, so slots rotate as they would (rarely).

func benchTracker(b *testing.B, keys []string, denied bool) {
	tr, _ := New(Config{})
	for _, k := range keys { // tracked before timing
		tr.Observe("per_route", k, 1, denied, t0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tr.Observe("per_route", keys[i%len(keys)], 1, denied, t0.Add(time.Duration(i)*time.Microsecond))
	}
}

func trackedKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("t_%d\x1f/v1/orders", i)
	}
	return keys
}

// BenchmarkObserveTracked: keys the sketches already count (32 of K=64).
func BenchmarkObserveTracked(b *testing.B) { benchTracker(b, trackedKeys(32), false) }

// BenchmarkObserveTrackedDenied: the same, denied: hits and denials.
func BenchmarkObserveTrackedDenied(b *testing.B) { benchTracker(b, trackedKeys(32), true) }

// BenchmarkObserveZipf: a Zipf stream over 100k keys, mostly untracked:
// each of those takes a counter and copies its key.
func BenchmarkObserveZipf(b *testing.B) {
	st := zipfStream(3, 1<<20, 100_000, 1.1)
	tr, _ := New(Config{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tr.Observe("per_route", st.keys[st.ids[i&(1<<20-1)]], 1, i%8 == 0, t0.Add(time.Duration(i)*time.Microsecond))
	}
}

// BenchmarkObserveParallel: every core observing, 16 policies, each
// goroutine starting at another one.
func BenchmarkObserveParallel(b *testing.B) {
	tr, _ := New(Config{})
	keys := trackedKeys(32)
	policies := make([]string, 16)
	for i := range policies {
		policies[i] = fmt.Sprint("policy_", i)
		for _, k := range keys {
			tr.Observe(policies[i], k, 1, false, t0)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var g atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(g.Add(5))
		for pb.Next() {
			tr.Observe(policies[i%len(policies)], keys[i%len(keys)], 1, false, t0.Add(time.Duration(i)*time.Microsecond))
			i++
		}
	})
}

// BenchmarkObserveRotating: the worst case a check meets once per slot
// and policy: every observation starts a new 10s slot, freezing a full
// sketch (K=64) and merging it up the cascade (into the 50s slot, every
// fifth time the 150s one too, and so on).
func BenchmarkObserveRotating(b *testing.B) {
	st := zipfStream(5, 1<<16, 10_000, 1.1)
	tr, _ := New(Config{})
	for i, id := range st.ids { // every slot's sketch full
		tr.Observe("per_route", st.keys[id], 1, false, t0.Add(time.Duration(i)*10*time.Second/(1<<10)))
	}
	start := t0.Add(time.Duration(len(st.ids)) * 10 * time.Second / (1 << 10))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		at := start.Add(time.Duration(i) * 10 * time.Second)
		for j := range 64 { // refill the new slot, as 64 checks would
			tr.Observe("per_route", st.keys[st.ids[(i*64+j)&(1<<16-1)]], 1, false, at)
		}
	}
}

// BenchmarkSketchAdd: one counted key, one sketch.
func BenchmarkSketchAdd(b *testing.B) {
	sk, _ := NewSketch(256)
	keys := trackedKeys(128)
	for _, k := range keys {
		sk.Add(k, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		sk.Add(keys[i%len(keys)], 1)
	}
}

// BenchmarkTop: a 5m window of six full slots merged and cut to 10.
func BenchmarkTop(b *testing.B) {
	tr, _ := New(Config{})
	st := zipfStream(4, 1<<16, 10_000, 1.1)
	for i, id := range st.ids {
		tr.Observe("per_route", st.keys[id], 1, true, t0.Add(time.Duration(i)*5*time.Millisecond))
	}
	now := t0.Add(time.Duration(len(st.ids)) * 5 * time.Millisecond)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := tr.Top("per_route", Denied, 5*time.Minute, 10, now); err != nil {
			b.Fatal(err)
		}
	}
}
