package meta

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkChangeOne is what a meta replica does for a one-policy change
// of a large set: decode the command, compute and compile the next set
// incrementally, record the version, and encode the answer the proposing
// node reads.
func BenchmarkChangeOne(b *testing.B) {
	for _, n := range []int{1_000, 300_000} {
		b.Run(fmt.Sprintf("policies=%dk", n/1000), func(b *testing.B) {
			f := &FSM{}
			raw, _ := json.Marshal(Command{Op: OpApply, Now: 1, Policies: tenantOverrides(n, 0, "100/min")})
			if res := f.Apply(raw).(Result); res.Err != "" {
				b.Fatal(res.Err)
			}
			i := 0
			for b.Loop() {
				i++
				raw, _ := json.Marshal(Command{Op: OpApply, Now: int64(1 + i), Policies: tenantOverrides(1, i%n, fmt.Sprintf("%d/min", 1000+i))})
				res := f.Apply(raw).(Result)
				if res.Err != "" || len(res.Changes.Changed) != 1 {
					b.Fatal(res.Err, res.Changes.Changed)
				}
				if _, err := json.Marshal(res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
