package cluster

import (
	"context"
	"maps"
	"time"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/telemetry"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// logDecision writes rd to the decision log when the log wants its kind:
// every deny, shadow would-deny and fail-open, and the sampled allows.
// The record is built only then, so a sampled-out allow costs a random
// draw.
func (d *decisions) logDecision(ctx context.Context, rd *decide.Decided) {
	if d.log.Idle() {
		return
	}
	a := rd.Answer
	// The kind first, from the verdicts alone: a sampled-out allow costs
	// no more than this and one random draw.
	kind := decisionlog.Deny
	switch a.Decision {
	case decide.Throttle:
		kind = decisionlog.Throttle
	case decide.Allow:
		kind = allowKind(a)
	}
	if !d.log.Wants(kind) {
		return
	}
	_, alg, _ := a.Deciding()
	decision, reason := "ALLOW", a.Reason.Name(alg)
	var delayMs int64
	switch a.Decision {
	case decide.Deny:
		decision = "DENY"
	case decide.Throttle:
		decision, delayMs = "THROTTLE", int64((a.Delay()-1)/time.Millisecond)+1 // rounded up, as the answer's
	}
	r := decisionlog.Record{Time: rd.At, RequestID: rd.Request.ID, TraceID: telemetry.TraceID(ctx), Node: d.node,
		Source: rd.Request.Source, Mode: rd.Mode, Decision: decision, DelayMs: delayMs, Reason: reason, Policy: a.AppliedPolicyID,
		PolicyVersion: a.PolicyVersion, LatencyUS: rd.Took.Microseconds(), Kind: kind, DenyCache: denyCached(a)}
	if ds := rd.Request.Descriptors; ds != nil {
		r.Descriptors = decisionlog.Descriptors{TenantID: ds.TenantID, APIKeyID: ds.APIKeyID, UserID: ds.UserID, IP: ds.IP,
			Route: ds.Route, Method: ds.Method, Service: ds.Service, Region: ds.Region, TenantTier: ds.TenantTier}
		if len(ds.Custom) > 0 {
			// The writer reads the map later; the request's may be reused.
			r.Descriptors.Custom = maps.Clone(ds.Custom)
		}
	}
	if len(a.Policies) > 0 {
		r.Policies = make([]decisionlog.Verdict, len(a.Policies))
		for i, pr := range a.Policies {
			v := decisionlog.Verdict{ID: pr.PolicyID, Mode: pr.Mode.String(), Decision: "ALLOW", Reason: pr.Reason.Name(pr.Algorithm),
				Remaining: pr.Remaining, Limit: pr.Limit, Key: displayKey(pr.Key)}
			if pr.Decision == decide.Deny && pr.Reason != decide.Refunded {
				// A refunded bucket allowed; another policy denied the
				// request and its spend was given back.
				v.Decision = "DENY"
			}
			if pr.Decision == decide.Throttle {
				v.Decision = "THROTTLE"
			}
			r.Policies[i] = v
		}
	}
	d.log.Log(&r)
}

// allowKind tells the allows that are always logged from the sampled
// ones: a request let through because a shard could not decide, or one a
// shadow policy would have denied though its reason names another (a soft
// policy over its limit takes precedence in the answer).
func allowKind(a *decide.Answer) decisionlog.Kind {
	kind := decisionlog.Allow
	for i := range a.Results {
		if a.Results[i].Reason == decide.FailOpen {
			return decisionlog.FailOpen
		}
	}
	for i := range a.Policies {
		switch a.Policies[i].Reason {
		case decide.FailOpen:
			return decisionlog.FailOpen
		case decide.ShadowWouldDeny:
			kind = decisionlog.ShadowWouldDeny
		}
	}
	return kind
}

// denyCached: the node denied a from its deny cache.
func denyCached(a *decide.Answer) bool {
	return a.Decision == decide.Deny && len(a.Results) > 0 && a.Results[0].Cached
}
