package decide

import (
	"context"
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
// soft and shadow ones only say so; a dry run consumes nothing; a request
// is leased only if every applied policy allows it.
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
	// The shadow policy's sliding log cannot be leased: strict throughout.
	if n := obs.get("request/strict/allow"); n != 3 {
		t.Errorf("%d strict allows, want 3 (the dry run and two checks: a SLIDING_LOG shadow policy keeps the request strict)", n)
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
