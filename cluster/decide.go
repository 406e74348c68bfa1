package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Descriptor checks: the request says who it is, the node's policy snapshot
// says which limits apply (policy.Snapshot.Resolve), and the limits are
// decided like items (check.go), hard policies all-or-nothing, soft and
// shadow ones beside them.

// evaluated is one applied policy with the items it contributed.
type evaluated struct {
	ev    policy.Evaluation
	first int // its items are items[first : first+len(ev.Items)]
}

func (n *Node) checkDescriptors(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	start := time.Now()
	if len(req.GetItems()) > 0 {
		return nil, badRequest("items", "set either items or descriptors, not both")
	}
	if len(req.GetRequestId()) > MaxRequestIDLen {
		return nil, badRequest("request_id", "longer than %d bytes", MaxRequestIDLen)
	}
	if _, ok := pb.Mode_name[int32(req.GetMode())]; !ok {
		return nil, badRequest("mode", "unknown mode %d", req.GetMode())
	}
	r, err := descriptorRequest(req.GetDescriptors(), &n.cfg.Limits)
	if err != nil {
		return nil, err
	}
	if !n.policiesSynced.Load() {
		return nil, errPoliciesBehind
	}
	snap := n.policySnapshot()
	res := resolutions.Get().(*policy.Resolution)
	defer resolutions.Put(res) // evs below point into it until the answer is built
	snap.DecideInto(&r, n.clock(), res)
	resp := &pb.CheckResponse{PolicyVersion: snap.Version(), DryRun: req.GetDryRun()}
	if blocked(*res, resp, n.clock()) {
		n.metrics.policyOutcome(resp.AppliedPolicyId, outcomeBlocked)
		n.observeRequest("policy", start, resp.Decision)
		return resp, nil
	}
	if len(res.Applied) == 0 {
		resp.Decision, resp.Reason = pb.Decision_DECISION_ALLOW, pb.Reason_REASON_NO_POLICY
		n.observeRequest("policy", start, resp.Decision)
		return resp, nil
	}
	items, evs, err := policyItems(res.Applied, &n.cfg.Limits)
	if err != nil {
		return nil, err
	}
	leased := req.GetMode() == pb.Mode_MODE_LEASED && !req.GetDryRun() && leasablePolicies(evs, items)
	if req.GetDryRun() {
		peekAll(items)
	}
	results, decision, err := n.decide(ctx, items, leased)
	if err != nil {
		return nil, err
	}
	resp.Decision, resp.Results = decision, results
	n.explainResults(resp, evs, items)
	n.observeCheck(modeLabel(leased), start, results, decision)
	return resp, nil
}

// errPoliciesBehind answers descriptor checks on a node that has not caught
// up with the meta group since it started: deciding with an older set
// could ignore a newer policy or block.
var errPoliciesBehind = status.Error(codes.Unavailable, "this node is catching up with the cluster's policy set after a restart; retry, or ask another node")

// resolutions keeps the resolvers' memory between checks: deciding which
// policies apply then allocates nothing.
var resolutions = sync.Pool{New: func() any { return new(policy.Resolution) }}

// descriptorRequest validates the descriptors, naming the field at fault.
func descriptorRequest(d *pb.Descriptors, lim *Limits) (policy.Request, error) {
	r := policy.Request{
		TenantID: d.GetTenantId(), APIKeyID: d.GetApiKeyId(), UserID: d.GetUserId(), IP: d.GetIp(),
		Route: d.GetRoute(), Method: d.GetMethod(), Service: d.GetService(), Region: d.GetRegion(),
		TenantTier: d.GetTenantTier(), IdempotencyKey: d.GetIdempotencyKey(), Cost: d.GetCost(),
	}
	fields := []struct{ name, v string }{
		{"tenant_id", r.TenantID}, {"api_key_id", r.APIKeyID}, {"user_id", r.UserID}, {"ip", r.IP},
		{"route", r.Route}, {"method", r.Method}, {"service", r.Service}, {"region", r.Region},
		{"tenant_tier", r.TenantTier}, {"idempotency_key", r.IdempotencyKey},
	}
	for _, f := range fields {
		if err := descriptorValue(f.v); err != "" {
			return r, badRequest("descriptors."+f.name, "%s", err)
		}
	}
	if r.IP != "" {
		if _, err := netip.ParseAddr(r.IP); err != nil {
			return r, badRequest("descriptors.ip", "%q is not an IPv4 or IPv6 address", r.IP)
		}
	}
	if d.RiskScore != nil {
		rs := d.GetRiskScore()
		if !(rs >= 0 && rs <= 1) { // also NaN
			return r, badRequest("descriptors.risk_score", "%v is outside [0, 1]", rs)
		}
		r.RiskScore, r.HasRisk = rs, true
	}
	if r.Cost < 0 || r.Cost > lim.MaxRequestCost {
		return r, badRequest("descriptors.cost", "%d is outside [0, %d]", r.Cost, lim.MaxRequestCost)
	}
	if len(d.GetCustom()) > maxCustomDescriptors {
		return r, badRequest("descriptors.custom", "%d custom descriptors exceed the maximum of %d", len(d.GetCustom()), maxCustomDescriptors)
	}
	if len(d.GetCustom()) > 0 {
		r.Custom = make(map[string]string, len(d.GetCustom()))
		for k, v := range d.GetCustom() {
			if err := descriptorValue(k); err != "" || k == "" {
				return r, badRequest("descriptors.custom", "name %q: %s", k, orEmpty(err))
			}
			if err := descriptorValue(v); err != "" {
				return r, badRequest("descriptors.custom."+k, "%s", err)
			}
			r.Custom[k] = v
		}
	}
	if err := r.Validate(); err != nil {
		return r, badRequest("descriptors", "%v", err)
	}
	return r, nil
}

const (
	maxDescriptorLen     = 256
	maxCustomDescriptors = 32
)

func orEmpty(err string) string {
	if err == "" {
		return "must not be empty"
	}
	return err
}

// descriptorValue says what is wrong with a descriptor value, or "".
func descriptorValue(v string) string {
	switch {
	case len(v) > maxDescriptorLen:
		return "longer than 256 bytes"
	case !utf8.ValidString(v):
		return "not valid UTF-8"
	case strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return "contains a control character"
	}
	return ""
}

// blocked answers a request an emergency block matched.
func blocked(res policy.Resolution, resp *pb.CheckResponse, now time.Time) bool {
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
	resp.Decision, resp.Reason, resp.AppliedPolicyId = pb.Decision_DECISION_DENY, pb.Reason_REASON_EMERGENCY_BLOCK, id
	resp.Policies = []*pb.PolicyResult{{
		PolicyId: id, Mode: pb.PolicyMode_POLICY_MODE_HARD, Decision: pb.Decision_DECISION_DENY,
		Reason: pb.Reason_REASON_EMERGENCY_BLOCK, RetryAfter: durationpb.New(max(0, retry)), ResetAfter: durationpb.New(max(0, retry)),
	}}
	return true
}

// policyItems turns the applied policies into items to decide.
func policyItems(applied []policy.Evaluation, lim *Limits) ([]item, []evaluated, error) {
	var items []item
	evs := make([]evaluated, len(applied))
	for i, ev := range applied {
		evs[i] = evaluated{ev: ev, first: len(items)}
		for _, pi := range ev.Items {
			it := item{
				op:   fsm.Op{Kind: fsm.OpTake, Key: policyBucketKey(pi.Name, pi.Key), Limit: pi.Limit, Cost: max(1, pi.Cost), IdempotencyKey: pi.IdempotencyKey},
				fail: pb.FailMode_FAIL_MODE_OPEN,
				soft: ev.Mode != policy.Hard,
			}
			if ev.Fail == policy.FailClosed {
				it.fail = pb.FailMode_FAIL_MODE_CLOSED
			} else {
				it.emergencyCap = ev.EmergencyCap
			}
			if len(it.op.IdempotencyKey) > fsm.MaxKeyLen {
				it.op.IdempotencyKey = hashedKey(it.op.IdempotencyKey)
			}
			items = append(items, it)
		}
	}
	if len(items) > lim.MaxRequestItems {
		return nil, nil, badRequest("descriptors", "the matching policies make %d buckets, more than the maximum of %d per request", len(items), lim.MaxRequestItems)
	}
	return items, evs, nil
}

// policyBucketKey keys a policy's bucket; a key too long for the state
// machine is replaced by its SHA-256, which keeps buckets apart as surely.
func policyBucketKey(name, key string) string {
	k := ring.BucketKey(name, key)
	if len(k) <= fsm.MaxKeyLen {
		return k
	}
	return ring.BucketKey(name, hashedKey(key))
}

func hashedKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// leasablePolicies: a request is decided leased only if every policy that
// applies allows it (consistency LEASED) and every bucket can be leased.
func leasablePolicies(evs []evaluated, items []item) bool {
	for _, e := range evs {
		if e.ev.Consistency != policy.Leased {
			return false
		}
	}
	for _, it := range items {
		if !it.op.Limit.Algorithm.Leasable() || it.op.IdempotencyKey != "" {
			return false
		}
	}
	return true
}

// explainResults fills in the per-policy view of a decided request: each
// item's policy, each policy's verdict, the deciding policy and the reason.
// A dry run is not counted in the per-policy metrics: it decided nothing.
func (n *Node) explainResults(resp *pb.CheckResponse, evs []evaluated, items []item) {
	var deciding, tightest, firstSoft *pb.PolicyResult
	var soft, shadow bool
	for _, e := range evs {
		pr := policyResult(e, resp.Results, items)
		resp.Policies = append(resp.Policies, pr)
		if !resp.DryRun {
			n.metrics.policyOutcome(e.ev.PolicyID, policyOutcomeOf(pr))
		}
		switch e.ev.Mode {
		case policy.Soft:
			soft = soft || pr.Reason == pb.Reason_REASON_OVER_LIMIT_SOFT
			if firstSoft == nil {
				firstSoft = pr
			}
		case policy.Shadow:
			shadow = shadow || pr.Reason == pb.Reason_REASON_SHADOW_WOULD_DENY
		default:
			if pr.Decision == pb.Decision_DECISION_DENY && pr.Reason != pb.Reason_REASON_REFUNDED && deciding == nil {
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
	switch {
	case resp.Decision == pb.Decision_DECISION_DENY && deciding != nil:
		resp.Reason = deciding.Reason
	case soft:
		resp.Reason = pb.Reason_REASON_OVER_LIMIT_SOFT
	case shadow:
		resp.Reason = pb.Reason_REASON_SHADOW_WOULD_DENY
	case deciding != nil:
		resp.Reason = deciding.Reason
	default:
		resp.Reason = pb.Reason_REASON_WITHIN_LIMIT
	}
	if deciding == nil {
		// Only soft and shadow policies applied: a soft policy's numbers
		// are for the caller (it warns or degrades by them), a shadow
		// policy's never are, or callers honouring the headers would back
		// off from a limit that is only being tried.
		deciding = firstSoft
	}
	if deciding != nil {
		resp.AppliedPolicyId = deciding.PolicyId
	}
}

// policyResult is one policy's verdict: denied if any of its buckets
// denied, reported by its tightest bucket (the denying one, else the one
// with the least remaining).
func policyResult(e evaluated, results []*pb.ItemResult, items []item) *pb.PolicyResult {
	var pick *pb.ItemResult
	for j := range e.ev.Items {
		res := results[e.first+j]
		res.PolicyId, res.Level = e.ev.PolicyID, e.ev.Items[j].Level
		if e.ev.Mode != policy.Hard && res.Reason == pb.Reason_REASON_OVER_LIMIT {
			res.Reason = softReason(e.ev.Mode)
		}
		if pick == nil || worse(res, pick) {
			pick = res
		}
	}
	return &pb.PolicyResult{
		PolicyId: e.ev.PolicyID, Mode: policyMode(e.ev.Mode), Decision: pick.Decision, Reason: pick.Reason,
		Limit: pick.Limit, Remaining: pick.Remaining, ResetAfter: pick.ResetAfter, RetryAfter: pick.RetryAfter,
		Layer: e.ev.Layer.String(), Algorithm: pick.Algorithm,
	}
}

// worse: a denial (other than a refund) beats an allow or a refund; among
// equals, less remaining.
func worse(a, b *pb.ItemResult) bool {
	da := a.Decision == pb.Decision_DECISION_DENY && a.Reason != pb.Reason_REASON_REFUNDED
	db := b.Decision == pb.Decision_DECISION_DENY && b.Reason != pb.Reason_REASON_REFUNDED
	if da != db {
		return da
	}
	return a.Remaining < b.Remaining
}

func softReason(m policy.Mode) pb.Reason {
	if m == policy.Shadow {
		return pb.Reason_REASON_SHADOW_WOULD_DENY
	}
	return pb.Reason_REASON_OVER_LIMIT_SOFT
}

func policyMode(m policy.Mode) pb.PolicyMode {
	switch m {
	case policy.Soft:
		return pb.PolicyMode_POLICY_MODE_SOFT
	case policy.Shadow:
		return pb.PolicyMode_POLICY_MODE_SHADOW
	}
	return pb.PolicyMode_POLICY_MODE_HARD
}

func policyOutcomeOf(pr *pb.PolicyResult) string {
	switch pr.Reason {
	case pb.Reason_REASON_FAIL_OPEN:
		return outcomeFailOpen
	case pb.Reason_REASON_UNAVAILABLE:
		return outcomeUnavailable
	case pb.Reason_REASON_OVER_LIMIT_SOFT:
		return outcomeSoftOver
	case pb.Reason_REASON_SHADOW_WOULD_DENY:
		return outcomeShadow
	}
	if pr.Decision == pb.Decision_DECISION_ALLOW || pr.Reason == pb.Reason_REASON_REFUNDED {
		return outcomeAllowed
	}
	return outcomeDenied
}

// observeRequest counts a request decided without buckets (blocked, or no
// policy matched).
func (n *Node) observeRequest(mode string, start time.Time, d pb.Decision) {
	n.metrics.requests.WithLabelValues(mode, decisionLabel(d)).Inc()
	n.metrics.latency.WithLabelValues(mode).Observe(time.Since(start).Seconds())
}
