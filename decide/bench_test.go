package decide

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The in-process leased decision, as a gateway's embedded limiter makes
// it, against the baseline of golang.org/x/time/rate's Allow in the same
// run: go test -run '^$' -bench 'Leased|XTimeRate' -benchmem ./decide/

// BenchmarkLeasedDescriptorCheck is one descriptor check of a LEASED
// policy answered from a lease the engine already holds.
func BenchmarkLeasedDescriptorCheck(b *testing.B) {
	e, req := leasedBench(b)
	defer e.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.Check(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkXTimeRateAllow is the baseline: one limiter's Allow, at the
// benchmarks' policy's rate (never empty).
func BenchmarkXTimeRateAllow(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

func leasedBench(b *testing.B) (*Engine, *Request) {
	c := newClock()
	f := newShards(b, 1, c)
	e := engine(f, c, func(cfg *Config) {
		cfg.Policies = compile(b, `
policies:
  - policy_id: plan
    scope: { tenant_tier: PRO }
    key: [tenant_id]
    algorithm: TOKEN_BUCKET
    config: { rate: 1000000000/s }
    consistency: LEASED
`)
		leased(cfg)
		cfg.CheckTimeout = time.Minute
		cfg.Clock = time.Now // as in a gateway: the baseline reads it too
	})
	req := &Request{Descriptors: &Descriptors{TenantID: "t1", TenantTier: "PRO"}}
	if a, err := e.Check(context.Background(), req); err != nil || a.Decision != Allow {
		b.Fatalf("first check: %+v %v", a, err)
	}
	return e, req
}

// BenchmarkLeasedPrepared is the same decision through a Prepared check
// (a gateway's handle on a subject): the fast path.
func BenchmarkLeasedPrepared(b *testing.B) {
	e, req := leasedBench(b)
	defer e.Close()
	p, err := e.Prepare(req)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	hits, _ := e.Leases().Decisions()
	for b.Loop() {
		if ok, err := p.Allow(ctx); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.StopTimer()
	after, _ := e.Leases().Decisions()
	b.ReportMetric(float64(after-hits)/float64(b.N), "lease-hits/op")
}

// BenchmarkStrictHotDenied is a strict check of one empty bucket, decided
// by the shard (an in-memory state machine here, no Raft: the gap in a
// cluster is far wider) or from the deny cache:
// go test -run '^$' -bench StrictHotDenied -benchmem ./decide/
func BenchmarkStrictHotDenied(b *testing.B) {
	for _, size := range []int{0, 1 << 16} {
		name := "cache=off"
		if size > 0 {
			name = "cache=on"
		}
		b.Run(name, func(b *testing.B) {
			c := newClock()
			f := newShards(b, 1, c)
			e := engine(f, c, func(cfg *Config) { cfg.DenyCache = size })
			req := &Request{Items: []Item{tbItem("api", "hot", 1)}}
			ctx := context.Background()
			if a, err := e.Check(ctx, req); err != nil || a.Decision != Allow {
				b.Fatal(a, err) // the bucket's one unit
			}
			b.ReportAllocs()
			for b.Loop() {
				if a, err := e.Check(ctx, req); err != nil || a.Decision != Deny {
					b.Fatal(a, err)
				}
			}
		})
	}
}
