package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/internal/httpheaders"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// checkAnswer is the HTTP decision contract's answer.
type checkAnswer struct {
	RequestID       string            `json:"request_id"`
	Decision        string            `json:"decision"`
	AppliedPolicyID string            `json:"applied_policy_id"`
	Remaining       int64             `json:"remaining"`
	ResetAfterMs    int64             `json:"reset_after_ms"`
	RetryAfterMs    int64             `json:"retry_after_ms"`
	DelayMs         int64             `json:"delay_ms"`
	Reason          string            `json:"reason"`
	LimitHeaders    map[string]string `json:"limit_headers"`
	PolicyVersion   uint64            `json:"policy_version"`
	DryRun          bool              `json:"dry_run"`
	Policies        []policyAnswer    `json:"policies"`

	limit, resetSec, retrySec int64
	decided                   bool // a policy result gave the numbers
}

type policyAnswer struct {
	PolicyID     string `json:"policy_id"`
	Mode         string `json:"mode"`
	Decision     string `json:"decision"`
	Reason       string `json:"reason"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	DelayMs      int64  `json:"delay_ms"`
	Layer        string `json:"layer"`
}

// answer renders resp. The numbers come from the deciding policy's result,
// and are zero when none decided (no policy, an emergency block).
func answer(requestID string, resp *pb.CheckResponse) *checkAnswer {
	a := &checkAnswer{
		RequestID:       requestID,
		Decision:        strings.TrimPrefix(resp.GetDecision().String(), "DECISION_"),
		AppliedPolicyID: resp.GetAppliedPolicyId(),
		Reason:          Reason(resp),
		LimitHeaders:    map[string]string{},
		PolicyVersion:   resp.GetPolicyVersion(),
		DryRun:          resp.GetDryRun(),
		Policies:        make([]policyAnswer, 0, len(resp.GetPolicies())),
	}
	for _, p := range resp.GetPolicies() {
		pa := policyAnswerOf(p)
		pa.DelayMs = delayMs(resp, p.GetPolicyId())
		a.Policies = append(a.Policies, pa)
		if p.GetPolicyId() == a.AppliedPolicyID && !a.decided {
			a.setNumbers(p)
		}
	}
	if admits(resp.GetDecision()) {
		a.DelayMs = delayMs(resp, "")
	}
	return a
}

// AnswerJSON encodes resp as the HTTP decision API answers it
// (docs/api.md), with each line indented by indent ("" for one line), so
// that other front ends print the same answer: quorate check --json.
func AnswerJSON(requestID string, resp *pb.CheckResponse, indent string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as writeJSON
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(answer(requestID, resp)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func admits(d pb.Decision) bool {
	return d == pb.Decision_DECISION_ALLOW || d == pb.Decision_DECISION_THROTTLE
}

// delayMs is the longest wait a shaping or throttled bucket asked of an
// admitted request (of policy id's buckets, or of all with ""): the caller
// acts after it.
func delayMs(resp *pb.CheckResponse, id string) int64 {
	var ms int64
	for _, r := range resp.GetResults() {
		if (id == "" || r.GetPolicyId() == id) && admits(r.GetDecision()) {
			ms = max(ms, ceilMs(r.GetDelay()))
		}
	}
	return ms
}

func (a *checkAnswer) setNumbers(p *pb.PolicyResult) {
	a.decided = true
	a.limit, a.Remaining = p.GetLimit(), p.GetRemaining()
	a.ResetAfterMs, a.RetryAfterMs = ceilMs(p.GetResetAfter()), ceilMs(p.GetRetryAfter())
	a.resetSec, a.retrySec = ceilSec(p.GetResetAfter()), ceilSec(p.GetRetryAfter())
	a.LimitHeaders["x-ratelimit-limit"] = strconv.FormatInt(a.limit, 10)
	a.LimitHeaders["x-ratelimit-remaining"] = strconv.FormatInt(a.Remaining, 10)
	a.LimitHeaders["x-ratelimit-reset"] = strconv.FormatInt(a.resetSec, 10)
}

// setHeaders sets the IETF RateLimit fields, on a deny with a wait
// Retry-After, and on a THROTTLE the wait in X-RateLimit-Delay-Ms, so a
// gateway can copy them as they are.
func (a *checkAnswer) setHeaders(h http.Header) {
	if a.DelayMs > 0 {
		h.Set(httpheaders.RateLimitDelay, strconv.FormatInt(a.DelayMs, 10))
	}
	if a.decided {
		h.Set("RateLimit-Limit", strconv.FormatInt(a.limit, 10))
		h.Set("RateLimit-Remaining", strconv.FormatInt(a.Remaining, 10))
		h.Set("RateLimit-Reset", strconv.FormatInt(a.resetSec, 10))
	}
	if a.Decision == "DENY" && a.retrySec > 0 {
		h.Set("Retry-After", strconv.FormatInt(a.retrySec, 10))
	}
}

func policyAnswerOf(p *pb.PolicyResult) policyAnswer {
	return policyAnswer{
		PolicyID:     p.GetPolicyId(),
		Mode:         strings.TrimPrefix(p.GetMode().String(), "POLICY_MODE_"),
		Decision:     strings.TrimPrefix(p.GetDecision().String(), "DECISION_"),
		Reason:       PolicyReason(p),
		Limit:        p.GetLimit(),
		Remaining:    p.GetRemaining(),
		ResetAfterMs: ceilMs(p.GetResetAfter()),
		RetryAfterMs: ceilMs(p.GetRetryAfter()),
		Layer:        p.GetLayer(),
	}
}

// Reason names why the request got its decision, as the HTTP API does (and
// the CLI, so that both say the same). OVER_LIMIT names what ran out in the
// deciding bucket; a refund names why the denying policy denied, since that
// is what the caller hit.
func Reason(resp *pb.CheckResponse) string {
	switch resp.GetReason() {
	case pb.Reason_REASON_OVER_LIMIT:
		return reasonName(pb.Reason_REASON_OVER_LIMIT, decidingAlgorithm(resp))
	case pb.Reason_REASON_REFUNDED:
		for _, p := range resp.GetPolicies() {
			if p.GetDecision() == pb.Decision_DECISION_DENY && p.GetReason() != pb.Reason_REASON_REFUNDED {
				return reasonName(p.GetReason(), p.GetAlgorithm())
			}
		}
	}
	return reasonName(resp.GetReason(), pb.Algorithm_ALGORITHM_UNSPECIFIED)
}

// decidingAlgorithm is the algorithm of the bucket that denied in the
// deciding policy, else that policy's tightest bucket's.
func decidingAlgorithm(resp *pb.CheckResponse) pb.Algorithm {
	id := resp.GetAppliedPolicyId()
	for _, r := range resp.GetResults() {
		if r.GetPolicyId() == id && r.GetReason() == pb.Reason_REASON_OVER_LIMIT {
			return r.GetAlgorithm()
		}
	}
	for _, p := range resp.GetPolicies() {
		if p.GetPolicyId() == id {
			return p.GetAlgorithm()
		}
	}
	return pb.Algorithm_ALGORITHM_UNSPECIFIED
}

// PolicyReason names one policy's reason as the HTTP API does.
func PolicyReason(p *pb.PolicyResult) string { return reasonName(p.GetReason(), p.GetAlgorithm()) }

// ReasonName is the contract's name for one result's reason, as the HTTP
// API names it; alg names what ran out when the reason is OVER_LIMIT.
func ReasonName(r pb.Reason, alg pb.Algorithm) string { return reasonName(r, alg) }

// reasonName is the contract's name for a reason (decide.Reason.Name).
func reasonName(r pb.Reason, alg pb.Algorithm) string {
	for d, w := range wireReasons {
		if w == r {
			return decide.Reason(d).Name(algorithms[alg])
		}
	}
	return strings.TrimPrefix(r.String(), "REASON_")
}

// ceilMs and ceilSec round up, so that a wait is never reported shorter
// than it is.
func ceilMs(d *durationpb.Duration) int64  { return ceilDiv(d.AsDuration(), time.Millisecond) }
func ceilSec(d *durationpb.Duration) int64 { return ceilDiv(d.AsDuration(), time.Second) }

func ceilDiv(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/unit) + 1
}
