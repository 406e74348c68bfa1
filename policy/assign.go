package policy

import "github.com/quorate/quorate/policy/tenants"

// Plans by tenant: a request that names its tenant and not its tier is
// resolved with the tier its tenant's assignment gives (tenants.Table),
// before any policy is looked up, so plan policies, shadow policies and
// explain see it as if the caller had sent it.

// TierSource says whose tenant_tier counts when a request carries one and
// its tenant has an assignment too.
type TierSource uint8

// The tier sources.
const (
	// TierFromAssignment: the assignment wins; the request's tier counts
	// only for tenants without one. A caller cannot claim a better plan
	// than the operator gave its tenant.
	TierFromAssignment TierSource = iota
	// TierFromRequest: the request's tier wins; the assignment fills in
	// only a missing one (callers that send tiers keep deciding them).
	TierFromRequest
)

// WithTenants returns a snapshot of the same policies that resolves tiers
// from t (nil: none) as src says. s is not changed: the copy shares its
// (immutable) indexes, and t must not change either.
func (s *Snapshot) WithTenants(t *tenants.Table, src TierSource) *Snapshot {
	c := *s
	c.tenants, c.tierSource = t, src
	return &c
}

// Tenants is the assignment the snapshot resolves tiers with (nil: none).
func (s *Snapshot) Tenants() *tenants.Table { return s.tenants }

// TierSource is whose tier counts where a request's and its tenant's
// assignment disagree (WithTenants).
func (s *Snapshot) TierSource() TierSource { return s.tierSource }

// assignedTier is the tier r's tenant assignment gives it, when it has one
// and it counts for r: what Resolve resolves r with.
func (s *Snapshot) assignedTier(r *Request) (tier, plan string, ok bool) {
	if s.tenants == nil || r.TenantID == "" || r.TenantTier != "" && s.tierSource == TierFromRequest {
		return "", "", false
	}
	plan, ok = s.tenants.Plan(r.TenantID)
	if !ok {
		return "", "", false
	}
	return s.PlanTier(plan), plan, true
}

// PlanTier is the tier an assignment's plan means: the tier a plan
// policy of that id scopes (plan_pro: scope { tenant_tier: PRO }), else
// the plan as written (PRO).
func (s *Snapshot) PlanTier(plan string) string {
	i, ok := s.byID.get(plan)
	if !ok || s.entries[i] == nil {
		return plan
	}
	if c := findCond(s.entries[i].conds, dTenantTier); c != nil && len(c.pats) == 1 && c.pats[0].kind == patExact {
		return c.pats[0].s
	}
	return plan
}

// value is the request's value of a descriptor, its tenant_tier the one
// the tenant assignment gives it if it gives one.
func (rs *resolver) value(ref descRef) string {
	if ref.d == dTenantTier && rs.tier != "" {
		return rs.tier
	}
	return rs.r.value(ref)
}

// TierNote says, for explain, where the tier r is resolved with comes
// from when the tenant assignment gives it; "" when it does not.
func (s *Snapshot) TierNote(r *Request) string {
	tier, plan, ok := s.assignedTier(r)
	if !ok {
		return ""
	}
	note := "tenant_tier " + tier + " from the tenant assignment"
	if plan != tier {
		note += " (plan " + plan + ")"
	}
	if r.TenantTier != "" && r.TenantTier != tier {
		note += "; the request's tenant_tier " + r.TenantTier + " is not used"
	}
	return note
}
