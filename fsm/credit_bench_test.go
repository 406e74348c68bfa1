package fsm

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGrantCredit is one credit grant on a group holding n live
// buckets. Its cost must not grow with n: the grant runs inside Apply on
// every replica.
func BenchmarkGrantCredit(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint("buckets=", n), func(b *testing.B) {
			m := New(Config{})
			slow := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Hour} // live for the whole run
			ops := make([]Op, 0, 1000)
			for i := range n {
				ops = append(ops, Op{Kind: OpTake, Key: fmt.Sprint("api\x00k", i), Limit: slow, Cost: 1})
				if len(ops) == cap(ops) || i == n-1 {
					m.Apply(&Command{Now: t0, Ops: ops}, nil)
					ops = ops[:0]
				}
			}
			// Many scopes, so that the per-scope bound on credits never
			// refuses one: every iteration is a real grant.
			scopes := make([]string, 4096)
			for i := range scopes {
				scopes[i] = fmt.Sprint("s", i)
			}
			cmd := Command{Now: t0, Ops: []Op{{Kind: OpCredit, Holder: "n1", TTL: time.Second}}}
			results := make([]Result, 0, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				cmd.Now += int64(200 * time.Microsecond)
				cmd.Ops[0].Key = scopes[i%len(scopes)]
				if r := m.Apply(&cmd, results[:0])[0]; !r.Allowed {
					b.Fatalf("credit refused: %+v", r)
				}
			}
		})
	}
}
