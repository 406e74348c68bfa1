package decide

import (
	"context"
	"sync"
	"time"

	"github.com/quorate/quorate/policy"
)

// Descriptor checks: the request says who it is, the policy set says which
// limits apply (policy.Snapshot.Resolve), and the limits are decided like
// items, hard policies all-or-nothing, soft and shadow ones beside them.

// evaluated is one applied policy with the items it contributed.
type evaluated struct {
	ev    policy.Evaluation
	first int // its items are items[first : first+len(ev.Items)]
}

// resolutions keeps the resolvers' memory between checks: deciding which
// policies apply then allocates nothing.
var resolutions = sync.Pool{New: func() any { return new(policy.Resolution) }}

func (e *Engine) checkDescriptors(ctx context.Context, req *Request, start time.Time) (*Answer, error) {
	r, err := parseDescriptors(req.Descriptors, &e.cfg.Limits)
	if err != nil {
		return nil, err
	}
	snap, err := e.snapshot()
	if err != nil {
		return nil, err
	}
	res := resolutions.Get().(*policy.Resolution)
	defer resolutions.Put(res) // the items below point into it until the answer is built
	now := e.clock()
	r.Memory = e.recaller(req.DryRun)
	snap.DecideInto(&r, now, res)
	ans := &Answer{PolicyVersion: snap.Version(), DryRun: req.DryRun}
	if blocked(*res, ans, now) {
		e.obs.PolicyOutcome(ans.AppliedPolicyID, outcomeBlocked)
		e.decidedByPolicy(ctx, req, ans, start)
		return ans, nil
	}
	if len(res.Applied) == 0 {
		ans.Decision, ans.Reason = Allow, NoPolicy
		e.decidedByPolicy(ctx, req, ans, start)
		return ans, nil
	}
	items, evs, err := policyItems(res.Applied, req.Mode, &e.cfg.Limits)
	if err != nil {
		return nil, err
	}
	for i := range items {
		items[i].version = ans.PolicyVersion
	}
	return e.run(ctx, start, req, items, evs, ans)
}

// recaller is the risk memory as a check sees it: a dry run (explain
// too) reads it and teaches it nothing.
func (e *Engine) recaller(dryRun bool) policy.RiskRecaller {
	if dryRun {
		return lookup{e.risk}
	}
	return learner{e.risk}
}

// decidedByPolicy counts and records a request decided without buckets.
func (e *Engine) decidedByPolicy(ctx context.Context, req *Request, ans *Answer, start time.Time) {
	took := e.clock().Sub(start)
	e.obs.Request("policy", ans.Decision.String(), took)
	e.record(ctx, req, ans, "policy", start, took)
}

func (e *Engine) snapshot() (*policy.Snapshot, error) {
	if e.cfg.Policies == nil {
		return nil, ErrPoliciesBehind
	}
	snap, synced := e.cfg.Policies.Policies()
	if !synced {
		return nil, ErrPoliciesBehind
	}
	return snap, nil
}

// blocked answers a request an emergency block matched.
func blocked(res policy.Resolution, ans *Answer, now time.Time) bool {
	var id string
	var retry time.Duration
	switch {
	case res.Block != nil:
		id, retry = res.Block.ID, res.Block.ExpiresAt.Sub(now)
	case res.BlockPolicy != "":
		id = res.BlockPolicy
	default:
		return false
	}
	ans.Decision, ans.Reason, ans.AppliedPolicyID = Deny, EmergencyBlock, id
	ans.Policies = []PolicyResult{{
		PolicyID: id, Mode: policy.Hard, Decision: Deny, Reason: EmergencyBlock,
		RetryAfter: max(0, retry), ResetAfter: max(0, retry),
	}}
	return true
}

// explain fills in the per-policy view of a decided request: each item's
// policy, each policy's verdict, the deciding policy and the reason. A dry
// run is not counted in the per-policy outcomes: it decided nothing.
func (e *Engine) explain(ans *Answer, evs []evaluated) {
	ans.Policies = make([]PolicyResult, len(evs))
	var deciding, tightest, firstSoft, throttling *PolicyResult
	var soft, shadow bool
	for k, ev := range evs {
		ans.Policies[k] = policyResult(ev, ans.Results)
		pr := &ans.Policies[k]
		if !ans.DryRun {
			e.obs.PolicyOutcome(ev.ev.PolicyID, policyOutcomeOf(pr))
		}
		if pr.Decision == Throttle && throttling == nil {
			throttling = pr
		}
		switch ev.ev.Mode {
		case policy.Soft:
			soft = soft || pr.Reason == OverLimitSoft
			if firstSoft == nil {
				firstSoft = pr
			}
		case policy.Shadow:
			shadow = shadow || pr.Reason == ShadowWouldDeny
		default:
			if pr.Decision == Deny && pr.Reason != Refunded && deciding == nil {
				deciding = pr
			}
			if tightest == nil || pr.Remaining < tightest.Remaining {
				tightest = pr
			}
		}
	}
	if deciding == nil {
		deciding = tightest
	}
	if ans.Decision == Throttle && throttling != nil {
		deciding = throttling // the wait is its: so are the numbers
	}
	switch {
	case ans.Decision == Deny && deciding != nil:
		ans.Reason = deciding.Reason
	case ans.Decision == Throttle && throttling != nil:
		ans.Reason = throttling.Reason
	case soft:
		ans.Reason = OverLimitSoft
	case shadow:
		ans.Reason = ShadowWouldDeny
	case deciding != nil:
		ans.Reason = deciding.Reason
	default:
		ans.Reason = WithinLimit
	}
	if deciding == nil {
		// Only soft and shadow policies applied: a soft policy's numbers
		// are for the caller (it warns or degrades by them), a shadow
		// policy's never are, or callers honouring the headers would back
		// off from a limit that is only being tried.
		deciding = firstSoft
	}
	if deciding != nil {
		ans.AppliedPolicyID = deciding.PolicyID
	}
}

// policyResult is one policy's verdict: denied if any of its buckets
// denied, reported by its tightest bucket (the denying one, else the one
// with the least remaining).
func policyResult(e evaluated, results []Result) PolicyResult {
	var pick *Result
	for j := range e.ev.Items {
		res := &results[e.first+j]
		res.PolicyID, res.Level = e.ev.PolicyID, e.ev.Items[j].Level
		if (e.ev.Mode == policy.Soft || e.ev.Mode == policy.Shadow) && res.Reason == OverLimit {
			res.Reason = softReason(e.ev.Mode)
		}
		if pick == nil || worse(res, pick) {
			pick = res
		}
	}
	return PolicyResult{
		PolicyID: e.ev.PolicyID, Mode: e.ev.Mode, Decision: pick.Decision, Reason: pick.Reason,
		Limit: pick.Limit, Remaining: pick.Remaining, ResetAfter: pick.ResetAfter, RetryAfter: pick.RetryAfter,
		Layer: e.ev.Layer.String(), Algorithm: pick.Algorithm, Key: e.ev.Items[0].Key,
	}
}

// worse: a denial (other than a refund) beats a throttle, which beats an
// allow or a refund; among equals, less remaining.
func worse(a, b *Result) bool {
	if ra, rb := severity(a), severity(b); ra != rb {
		return ra > rb
	}
	return a.Remaining < b.Remaining
}

func severity(r *Result) int {
	switch {
	case r.Decision == Deny && r.Reason != Refunded:
		return 2
	case r.Decision == Throttle:
		return 1
	}
	return 0
}

func softReason(m policy.Mode) Reason {
	if m == policy.Shadow {
		return ShadowWouldDeny
	}
	return OverLimitSoft
}

// The outcomes a policy's decision is counted under (Observer.PolicyOutcome).
const (
	outcomeAllowed     = "allowed"
	outcomeDenied      = "denied"
	outcomeSoftOver    = "soft_over"
	outcomeShadow      = "shadow_would_deny"
	outcomeFailOpen    = "fail_open"
	outcomeUnavailable = "unavailable"
	outcomeBlocked     = "blocked"
	outcomeThrottled   = "throttled"
)

func policyOutcomeOf(pr *PolicyResult) string {
	switch pr.Reason {
	case FailOpen:
		return outcomeFailOpen
	case Unavailable:
		return outcomeUnavailable
	case ShadowWouldDeny:
		return outcomeShadow
	}
	if pr.Decision == Throttle {
		return outcomeThrottled // before soft_over: a SOFT policy's friction
	}
	if pr.Reason == OverLimitSoft {
		return outcomeSoftOver
	}
	if pr.Decision == Allow || pr.Reason == Refunded {
		return outcomeAllowed
	}
	return outcomeDenied
}

// Explanation is which policies a request matches and what a dry run of it
// decides.
type Explanation struct {
	Version uint64
	// Tier says where the tenant_tier resolved with came from when the
	// tenant assignment gave it ("" when it did not).
	Tier    string
	BlockID string // an active block or a BLOCK policy that matched
	Matches []policy.Match
	Answer  *Answer
}

// Explain resolves descriptors against the policy set without consuming
// anything: every matching policy with why it was or was not selected, and
// the dry run's answer.
func (e *Engine) Explain(ctx context.Context, d *Descriptors) (*Explanation, error) {
	r, err := parseDescriptors(d, &e.cfg.Limits)
	if err != nil {
		return nil, err
	}
	if e.cfg.Policies == nil {
		return nil, ErrPoliciesBehind
	}
	snap, _ := e.cfg.Policies.Policies()
	r.Memory = e.recaller(true)
	res := snap.Resolve(&r, e.clock())
	ex := &Explanation{Version: snap.Version(), Tier: snap.TierNote(&r), Matches: res.Matched, BlockID: res.BlockPolicy}
	if res.Block != nil {
		ex.BlockID = res.Block.ID
	}
	if ex.Answer, err = e.Check(ctx, &Request{Descriptors: d, DryRun: true}); err != nil {
		return nil, err
	}
	return ex, nil
}
