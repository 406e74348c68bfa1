package meta

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
)

// BenchmarkChangeOne is what a meta replica does for a one-policy change
// of a large set: decode the command, compute and compile the next set
// incrementally, record the version, and encode the answer the proposing
// node reads. apply changes one policy's limit, delete removes one, block
// adds an emergency block.
func BenchmarkChangeOne(b *testing.B) {
	for _, n := range []int{1_000, 300_000} {
		for _, op := range []string{OpApply, OpDelete, OpBlock} {
			b.Run(fmt.Sprintf("policies=%dk/%s", n/1000, op), func(b *testing.B) {
				f := &FSM{}
				raw, _ := json.Marshal(Command{Op: OpApply, Now: 1, Policies: tenantOverrides(n, 0, "100/min")})
				if res := f.Apply(raw).(Result); res.Err != "" {
					b.Fatal(res.Err)
				}
				i := 0
				for b.Loop() {
					i++
					c := Command{Op: op, Now: int64(1 + i)}
					switch op {
					case OpApply:
						c.Policies = tenantOverrides(1, i%n, fmt.Sprintf("%d/min", 1000+i))
					case OpDelete:
						c.IDs = []string{tenantOverrides(1, i%n, "")[0].ID}
					case OpBlock:
						c.Block = &policy.Block{Scope: map[string]string{"tenant_id": fmt.Sprintf("tn_%d", i)}, ExpiresAt: time.Unix(0, c.Now).Add(time.Hour)}
					}
					raw, _ := json.Marshal(c)
					res := f.Apply(raw).(Result)
					if res.Err != "" || len(res.Changes.Changed)+len(res.Changes.Removed) != 1 && res.Block == nil {
						b.Fatal(res.Err, res.Changes)
					}
					if _, err := json.Marshal(res); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
