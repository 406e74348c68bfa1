package decide

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
)

const plans = `
policies:
  - policy_id: plan
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 2/h } }]
    consistency: LEASED
  - policy_id: soft_ip
    mode: SOFT
    scope: { ip: "*" }
    key: [ip]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 1/h } }]
    consistency: LEASED
  - policy_id: trial
    mode: SHADOW
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    limits: [{ name: main, algorithm: SLIDING_LOG, config: { limit: 1/h } }]
`

// TestDescriptorCheck: the policies that match decide, hard ones deny,
// soft and shadow ones only say so; a dry run consumes nothing; each
// policy's buckets are decided as its consistency says.
func TestDescriptorCheck(t *testing.T) {
	c := newClock()
	f := newShards(t, 2, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cfg.Policies = compile(t, plans); cfg.Observer = obs; leased(cfg) })
	defer e.Close()
	req := func(dry bool) *Request {
		return &Request{Mode: Leased, DryRun: dry, Descriptors: &Descriptors{TenantID: "t1", TenantTier: "FREE", IP: "192.0.2.1"}}
	}
	check := func(r *Request) *Answer {
		t.Helper()
		ans, err := e.Check(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	if ans := check(req(true)); ans.Decision != Allow || !ans.DryRun || len(ans.Policies) != 3 {
		t.Fatalf("dry run: %+v", ans)
	}
	first := check(req(false))
	if first.Decision != Allow || first.AppliedPolicyID != "plan" || first.PolicyVersion != 1 {
		t.Fatalf("first: %+v", first)
	}
	second := check(req(false))
	if second.Decision != Allow || second.Reason != OverLimitSoft {
		t.Fatalf("second: %+v, want allowed, the soft policy over", second)
	}
	for _, pr := range second.Policies {
		want := map[string]Reason{"plan": WithinLimit, "soft_ip": OverLimitSoft, "trial": ShadowWouldDeny}[pr.PolicyID]
		if pr.Reason != want {
			t.Errorf("policy %s: %v, want %v", pr.PolicyID, pr.Reason, want)
		}
	}
	third := check(req(false))
	if third.Decision != Deny || third.AppliedPolicyID != "plan" || third.Reason != OverLimit {
		t.Fatalf("third: %+v, want denied by plan", third)
	}
	// The dry run peeks at the shards; the checks mix the LEASED policies'
	// buckets with the shadow policy's sliding log, which cannot be leased.
	if n, m := obs.get("request/strict/allow"), obs.get("request/mixed/allow"); n != 1 || m != 2 {
		t.Errorf("%d strict and %d mixed allows, want 1 (the dry run) and 2", n, m)
	}
	if n := obs.get("item/strict/deny/shadow_would_deny"); n != 2 {
		t.Errorf("%d strict shadow items, want 2: %v", n, obs.counts)
	}
	if obs.get("policy/plan/denied") != 1 || obs.get("policy/soft_ip/soft_over") != 2 {
		t.Errorf("policy outcomes %v", obs.counts)
	}
}

// TestBlockedAndNoPolicy: an emergency block denies without charging; a
// request no policy matches is allowed with NoPolicy.
func TestBlockedAndNoPolicy(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	ps, err := policy.Parse("p.yaml", []byte(plans))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile(ps, []policy.Block{{ID: "block-1", Scope: map[string]string{"tenant_id": "bad"}, ExpiresAt: c.Now().Add(time.Minute)}}, 7)
	if err != nil {
		t.Fatal(err)
	}
	e := engine(f, c, func(cfg *Config) { cfg.Policies = staticPolicies{snap} })
	ans, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "bad", TenantTier: "FREE"}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != Deny || ans.Reason != EmergencyBlock || ans.AppliedPolicyID != "block-1" || ans.Policies[0].RetryAfter != time.Minute {
		t.Errorf("blocked: %+v", ans)
	}
	ans, err = e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "x", TenantTier: "GOLD"}})
	if err != nil || ans.Decision != Allow || ans.Reason != NoPolicy {
		t.Errorf("no policy: %+v %v", ans, err)
	}
	if len(f.calls) != 0 {
		t.Errorf("%d submits, want none", len(f.calls))
	}
	ex, err := e.Explain(context.Background(), &Descriptors{TenantID: "t", TenantTier: "FREE", IP: "192.0.2.1"})
	if err != nil || len(ex.Matches) != 3 || ex.Answer.Decision != Allow || !ex.Answer.DryRun || ex.Version != 7 {
		t.Errorf("explain: %+v %v", ex, err)
	}
}

const mixed = `
policies:
  - policy_id: plan
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 5/h } }]
    consistency: LEASED
  - policy_id: payments
    layer: ROUTE
    scope: { route: /pay }
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 1/h } }]
`

// TestConsistencyIsThePolicys: a LEASED policy is decided from the lease
// table without the caller asking, unless the caller asks for STRICT; one
// request mixes leased and strict policies all-or-nothing, and a denial
// at the shard gives the leased spend back.
func TestConsistencyIsThePolicys(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cfg.Policies = compile(t, mixed); cfg.Observer = obs; leased(cfg) })
	defer e.Close()
	check := func(mode Mode, route string) *Answer {
		t.Helper()
		ans, err := e.Check(context.Background(), &Request{Mode: mode, Descriptors: &Descriptors{TenantID: "t1", TenantTier: "FREE", Route: route}})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	planKey := policyBucketKey("plan/main", "t1")
	if a := check(ModeDefault, "/"); a.Decision != Allow || obs.get("item/leased/allow/within_limit") != 1 {
		t.Fatalf("default mode: %+v %v, want the LEASED policy decided leased", a, obs.counts)
	}
	if n := f.takesOf(0, planKey); n != 0 {
		t.Errorf("%d takes of the plan's bucket at the shard, want 0 (leased)", n)
	}
	if a := check(Strict, "/"); a.Decision != Allow || f.takesOf(0, planKey) != 1 {
		t.Fatalf("strict mode: %+v, %d takes at the shard, want 1", a, f.takesOf(0, planKey))
	}
	// Mixed: the first passes both; the second is denied by the strict
	// route policy and its leased spend comes back. A renewal the lease
	// table sends meanwhile changes the budget too: then the tenant's
	// pair is not a measurement, and the next tenant's is.
	mixedCheck := func(tenant string) *Answer {
		t.Helper()
		ans, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: tenant, TenantTier: "FREE", Route: "/pay"}})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	if a := mixedCheck("t1"); a.Decision != Allow || obs.get("request/mixed/allow") != 1 {
		t.Fatalf("mixed: %+v %v", a, obs.counts)
	}
	for i := 1; ; i++ {
		tenant := fmt.Sprint("t", i)
		if i > 1 {
			if a := mixedCheck(tenant); a.Decision != Allow {
				t.Fatalf("mixed, %s: %+v", tenant, a)
			}
		}
		grants, held := f.grants(), e.Leases().Held()
		a := mixedCheck(tenant)
		if a.Decision != Deny || a.AppliedPolicyID != "payments" {
			t.Fatalf("mixed over: %+v, want denied by payments", a)
		}
		for _, pr := range a.Policies {
			if pr.PolicyID == "plan" && pr.Reason != Refunded {
				t.Errorf("plan: %v, want REFUNDED", pr.Reason)
			}
		}
		after := e.Leases().Held()
		if f.grants() != grants && i < 5 {
			continue
		}
		if after != held {
			t.Errorf("lease budget %d before, %d after the denied request: the leased spend was not given back", held, after)
		}
		break
	}
}
