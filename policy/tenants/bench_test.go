package tenants

import (
	"fmt"
	"runtime"
	"testing"
)

var benchPlans = []string{"FREE", "PRO", "ENTERPRISE", "plan_team"}

func benchAssignments(from, n int) []Assignment {
	as := make([]Assignment, n)
	for i := range as {
		as[i] = Assignment{fmt.Sprintf("t_%07d", from+i), benchPlans[(from+i)%len(benchPlans)]}
	}
	return as
}

// build imports n assignments as the CLI sends them: chunks of 5,000.
func build(n int) *Table {
	var t *Table
	for from := 0; from < n; from += 5000 {
		t, _ = t.Set(benchAssignments(from, min(5000, n-from)))
	}
	return t
}

// BenchmarkPlan is the check path's lookup in a table of a million.
func BenchmarkPlan(b *testing.B) {
	t := build(1_000_000)
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = fmt.Sprintf("t_%07d", i*241)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok := t.Plan(ids[i%len(ids)]); !ok {
			b.Fatal("missing")
		}
	}
}

// BenchmarkSet is what a replica does per command in a table of a million:
// one tenant moved (tenant set), or a chunk of 5,000 moved (an import).
func BenchmarkSet(b *testing.B) {
	t := build(1_000_000)
	for _, n := range []int{1, 5000} {
		b.Run(fmt.Sprintf("assignments=%d", n), func(b *testing.B) {
			chunk := benchAssignments(123_456, n)
			for i := range chunk {
				chunk[i].Plan = "MOVED"
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, ch := t.Set(chunk); ch.Set != n {
					b.Fatal(ch)
				}
			}
		})
	}
}

// BenchmarkImport imports a million assignments in chunks of 5,000, from
// empty, and reports the heap a table of a million holds per assignment
// (ids of 9 bytes, four plans).
func BenchmarkImport(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		build(n)
	}
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t := build(n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/assignment")
	runtime.KeepAlive(t)
}
