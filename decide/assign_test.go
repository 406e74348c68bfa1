package decide

import (
	"context"
	"testing"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/tenants"
)

const tiers = `
policies:
  - policy_id: plan_free
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 2/h }
  - policy_id: plan_pro
    scope: { tenant_tier: PRO }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 5/h }
`

// TestCheckByAssignment: a check that names only its tenant is decided by
// the plan the tenant assignment gives it; moving the tenant to another
// plan changes its limit with the next snapshot, and explain says where
// the tier came from.
func TestCheckByAssignment(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	base := compile(t, tiers).snap
	var pols switchPolicies
	assignment := func(plan string) {
		table, _ := (*tenants.Table)(nil).Set([]tenants.Assignment{{TenantID: "t_1", Plan: plan}})
		pols.set(base.WithTenants(table, policy.TierFromAssignment))
	}
	assignment("FREE")
	e := engine(f, c, func(cfg *Config) { cfg.Policies = &pols })
	defer e.Close()
	check := func() *Answer {
		t.Helper()
		ans, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "t_1"}})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	for i := range 3 {
		ans := check()
		if ans.AppliedPolicyID != "plan_free" || ans.Policies[0].Limit != 2 || (ans.Decision == Allow) != (i < 2) {
			t.Fatalf("check %d on FREE: %s by %s (limit %d)", i+1, ans.Decision, ans.AppliedPolicyID, ans.Policies[0].Limit)
		}
	}
	assignment("plan_pro") // the plan policy's id: PRO
	if ans := check(); ans.Decision != Allow || ans.AppliedPolicyID != "plan_pro" || ans.Policies[0].Limit != 5 {
		t.Fatalf("on PRO: %s by %s (limit %d)", ans.Decision, ans.AppliedPolicyID, ans.Policies[0].Limit)
	}
	ex, err := e.Explain(context.Background(), &Descriptors{TenantID: "t_1", TenantTier: "FREE"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "tenant_tier PRO from the tenant assignment (plan plan_pro); the request's tenant_tier FREE is not used"; ex.Tier != want || ex.Answer.AppliedPolicyID != "plan_pro" {
		t.Errorf("explain: %q by %s; want %q", ex.Tier, ex.Answer.AppliedPolicyID, want)
	}
	// A tenant without an assignment is decided by the tier it sends.
	ans, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "t_2", TenantTier: "FREE"}})
	if err != nil || ans.AppliedPolicyID != "plan_free" {
		t.Fatalf("t_2 with FREE: %+v %v", ans, err)
	}
}
