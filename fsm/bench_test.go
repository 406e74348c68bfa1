package fsm

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// benchLimits gives each algorithm a limit that a Take every microsecond
// mostly satisfies, so the benchmark measures the allow path that stores.
func benchLimit(alg Algorithm) Limit {
	switch alg {
	case SlidingLog:
		return Limit{Algorithm: alg, Limit: 1000, Period: time.Millisecond * 2}
	case GCRA, LeakyShaping: // one unit per µs: the finest interval they accept
		return Limit{Algorithm: alg, Limit: 1_000_000, Period: time.Second, Burst: 1000}
	default:
		return Limit{Algorithm: alg, Limit: 2_000_000, Period: time.Second, Burst: 1000}
	}
}

// BenchmarkTake is one Take on an existing key per op, time advancing 1µs.
func BenchmarkTake(b *testing.B) {
	for alg := TokenBucket; alg < numAlgorithms; alg++ {
		b.Run(alg.String(), func(b *testing.B) {
			m := New(Config{})
			cmd := Command{Now: t0, Ops: []Op{{Kind: OpTake, Key: "tenant:42", Limit: benchLimit(alg), Cost: 1}}}
			results := make([]Result, 0, 1)
			if r := m.Apply(&cmd, results); r[0].Err != nil {
				b.Fatal(r[0].Err) // a benchmark of the error path would mislead
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				cmd.Now += int64(time.Microsecond)
				results = m.Apply(&cmd, results[:0])
			}
		})
	}
}

// BenchmarkXTimeRate is the baseline: x/time/rate's AllowN on one limiter,
// at the same rate, burst and clock steps as BenchmarkTake/token_bucket.
func BenchmarkXTimeRate(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(2_000_000), 1000)
	now := time.Unix(0, t0)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now = now.Add(time.Microsecond)
		lim.AllowN(now, 1)
	}
}

// BenchmarkApplyBatch applies 1,000-op batches over 100k keys and reports
// the cost per operation.
func BenchmarkApplyBatch(b *testing.B) {
	const keys, batch = 100_000, 1000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("tenant:%d", i)
	}
	l := Limit{Algorithm: TokenBucket, Limit: 1000, Period: time.Second}
	m := New(Config{})
	cmd := Command{Now: t0, Ops: make([]Op, batch)}
	results := make([]Result, 0, batch)
	next := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		cmd.Now += int64(time.Millisecond)
		for j := range cmd.Ops {
			cmd.Ops[j] = Op{Kind: OpTake, Key: names[next], Limit: l, Cost: 1}
			next = (next + 7919) % keys // a prime stride visits every key
		}
		results = m.Apply(&cmd, results[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/operation")
}

// BenchmarkMemoryPerBucket fills 1M token-bucket keys and reports the heap
// growth per key (keys are stored as 64-bit hashes, so key bytes don't count).
func BenchmarkMemoryPerBucket(b *testing.B) {
	const n = 1_000_000
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		b.Run(alg.String(), func(b *testing.B) {
			l := Limit{Algorithm: alg, Limit: 10, Period: time.Minute}
			var perKey float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				m := New(Config{})
				op := []Op{{Kind: OpTake, Limit: l, Cost: 1}}
				cmd := Command{Now: t0, Ops: op}
				res := make([]Result, 0, 1)
				var key []byte
				for i := range n {
					key = fmt.Appendf(key[:0], "user:%d", i)
					op[0].Key = string(key)
					res = m.Apply(&cmd, res[:0])
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(m)
			}
			b.ReportMetric(perKey, "B/bucket")
		})
	}
}
