package meta

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/quorate/quorate/policy"
)

// tenantOverrides are n tenant overrides at limit, as a large set holds
// them.
func tenantOverrides(n int, from int, limit string) []policy.Policy {
	ps := make([]policy.Policy, n)
	for i := range ps {
		id := fmt.Sprintf("ovr_%06d", from+i)
		ps[i] = policy.Policy{ID: id, Scope: policy.Scope{"tenant_id": {"tn_" + id}}, Key: []string{"tenant_id"},
			Algorithm: "SLIDING_WINDOW", Config: &policy.Config{Limit: policy.Amount(limit)}}
	}
	return ps
}

// BenchmarkHistory: a set of 100k tenant overrides, then 10 versions that
// each change 1,000 of them: what recording a version adds to a change,
// what rebuilding the oldest costs (a rollback's command, a diff), and
// what a kept body weighs in memory and in the snapshot.
func BenchmarkHistory(b *testing.B) {
	const n, step, versions = 100_000, 1_000, 10
	f := &FSM{}
	apply := func(now int, ps []policy.Policy) {
		raw, _ := json.Marshal(Command{Op: OpApply, Now: int64(now), Policies: ps})
		if res := f.Apply(raw).(Result); res.Err != "" {
			b.Fatal(res.Err)
		}
	}
	apply(1, tenantOverrides(n, 0, "100/min"))
	for v := range versions {
		apply(2+v, tenantOverrides(step, v*step, fmt.Sprintf("%d/min", 200+v)))
	}
	st, h := f.History()
	b.Run("apply", func(b *testing.B) {
		// A whole change of 1,000 at 100k, history included: the
		// yardstick for record's cost.
		g := &FSM{}
		snap, _ := f.Snapshot()
		if err := g.Restore(snap); err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			i++
			raw, _ := json.Marshal(Command{Op: OpApply, Now: int64(100 + i), Policies: tenantOverrides(step, 0, fmt.Sprintf("%d/min", 1000+i))})
			if res := g.Apply(raw).(Result); res.Err != "" {
				b.Fatal(res.Err)
			}
		}
	})
	b.Run("record", func(b *testing.B) {
		ch := policy.Changes{Changed: make([]string, step)}
		for i := range step {
			ch.Changed[i] = st.Policies[i].ID
		}
		for b.Loop() {
			entryOf(&Command{Op: OpApply}, st, ch, nil)
		}
	})
	b.Run("rollback-command", func(b *testing.B) {
		for b.Loop() {
			c, err := RollbackCommand(st, h, 1)
			if err != nil || len(c.Policies) != versions*step {
				b.Fatal(err)
			}
		}
	})
	b.Run("diff", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := Diff(st, h, 1, st.Version, maxBenchLines); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kept-body", func(b *testing.B) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		bodies := tenantOverrides(n, 0, "100/min")
		runtime.GC()
		runtime.ReadMemStats(&after)
		snap, _ := json.Marshal(h)
		for b.Loop() {
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/body")
		b.ReportMetric(float64(len(snap))/float64(h.Changes()), "snapshot-B/body")
		runtime.KeepAlive(bodies)
	})
}

const maxBenchLines = 10_000
