package decide

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/quorate/quorate/policy"
)

// TestPrepared: a prepared check of a LEASED policy decides from the
// lease, never over the limit; a STRICT one, and a changed policy set,
// decide by a full check.
func TestPrepared(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	pols := &switchPolicies{}
	pols.set(compile(t, mixed).snap)
	e := engine(f, c, func(cfg *Config) { cfg.Policies = pols; leased(cfg) })
	defer e.Close()
	ctx := context.Background()
	allowN := func(p *Prepared, n int) int {
		t.Helper()
		k := 0
		for range n {
			ok, err := p.Allow(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				k++
			}
		}
		return k
	}
	plan, err := e.Prepare(&Request{Descriptors: &Descriptors{TenantID: "t1", TenantTier: "FREE", Route: "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.fast.Load().ok {
		t.Fatalf("a LEASED policy's single bucket has no fast path")
	}
	if n := allowN(plan, 9); n != 5 {
		t.Errorf("%d of 9 allowed under 5/h; want 5", n)
	}
	if n := f.takesOf(0, policyBucketKey("plan/main", "t1")); n != 0 {
		t.Errorf("%d takes at the shard; want none (leased)", n)
	}
	pay, err := e.Prepare(&Request{Descriptors: &Descriptors{TenantID: "t2", TenantTier: "FREE", Route: "/pay"}})
	if err != nil {
		t.Fatal(err)
	}
	if pay.fast.Load().ok {
		t.Errorf("a request with a STRICT policy has a fast path")
	}
	if n := allowN(pay, 3); n != 1 {
		t.Errorf("%d of 3 allowed under the strict 1/h; want 1", n)
	}
	// A new set: the prepared check follows it.
	pols.set(compile(t, `
policies:
  - policy_id: plan
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 5/h } }]
`).snap)
	if _, err := plan.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if plan.fast.Load().ok {
		t.Errorf("the plan became STRICT, and the prepared check kept its fast path")
	}
	if _, err := e.Prepare(&Request{}); err == nil {
		t.Errorf("Prepare without descriptors: no error")
	}
}

// switchPolicies is a policy set a test can replace.
type switchPolicies struct {
	s atomic.Pointer[policy.Snapshot]
}

func (p *switchPolicies) set(s *policy.Snapshot)             { p.s.Store(s) }
func (p *switchPolicies) Policies() (*policy.Snapshot, bool) { return p.s.Load(), true }
