package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// throttledAnswer is the engine's answer to a request a THROTTLE policy
// holds for 200.4ms (a wait is rounded up to whole milliseconds).
func throttledAnswer() *pb.CheckResponse {
	wait := 200*time.Millisecond + 400*time.Microsecond
	return checkResponse(&decide.Answer{
		Decision: decide.Throttle, Reason: decide.Throttled, AppliedPolicyID: "shaped", PolicyVersion: 3,
		Results: []decide.Result{
			{Decision: decide.Throttle, Reason: decide.Throttled, Limit: 1, Delay: wait, PolicyID: "shaped", Algorithm: fsm.LeakyShaping},
			{Decision: decide.Allow, Reason: decide.WithinLimit, Limit: 100, Remaining: 50, PolicyID: "plan", Algorithm: fsm.TokenBucket},
		},
		Policies: []decide.PolicyResult{
			{PolicyID: "shaped", Mode: policy.Throttle, Decision: decide.Throttle, Reason: decide.Throttled, Limit: 1, ResetAfter: 300 * time.Millisecond, Layer: "TENANT", Algorithm: fsm.LeakyShaping},
			{PolicyID: "plan", Mode: policy.Hard, Decision: decide.Allow, Reason: decide.WithinLimit, Limit: 100, Remaining: 50, Layer: "GLOBAL", Algorithm: fsm.TokenBucket},
		},
	})
}

// TestCheckThrottle: a THROTTLE is answered 200 with "decision":"THROTTLE",
// the wait in delay_ms (the request's and its policy's) and in
// X-RateLimit-Delay-Ms, and no Retry-After: the request is admitted.
func TestCheckThrottle(t *testing.T) {
	resp := throttledAnswer()
	if resp.GetDecision() != pb.Decision_DECISION_THROTTLE || resp.GetDelay().AsDuration() != 200*time.Millisecond+400*time.Microsecond ||
		resp.GetReason() != pb.Reason_REASON_THROTTLED || resp.GetPolicies()[0].GetMode() != pb.PolicyMode_POLICY_MODE_THROTTLE {
		t.Fatalf("wire answer %v", resp)
	}
	w := serve(&fakeBackend{resp: resp}, "POST", "/v1/limit/check", `{}`)
	var a checkAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusOK || a.Decision != "THROTTLE" || a.Reason != "THROTTLED" || a.DelayMs != 201 {
		t.Errorf("status %d, answer %s %s delay_ms %d; want 200 THROTTLE THROTTLED 201", w.Code, a.Decision, a.Reason, a.DelayMs)
	}
	if p := a.Policies[0]; p.Mode != "THROTTLE" || p.Decision != "THROTTLE" || p.DelayMs != 201 || a.Policies[1].DelayMs != 0 {
		t.Errorf("policies %+v", a.Policies)
	}
	for k, v := range map[string]string{"X-Rate-Limit-Decision": "THROTTLE", "X-Ratelimit-Delay-Ms": "201", "Retry-After": "", "Ratelimit-Limit": "1"} {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// TestForwardAuthThrottle: forward auth lets a THROTTLE through (200) with
// the wait in X-RateLimit-Delay-Ms, for a proxy that can hold the request.
func TestForwardAuthThrottle(t *testing.T) {
	w := forward(&fakeBackend{resp: throttledAnswer()}, "GET", "/v1/forward-auth", map[string]string{"X-Tenant-Id": "t_1"})
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("throttle: %d %q, want 200 and no body", w.Code, w.Body)
	}
	for k, v := range map[string]string{"X-Rate-Limit-Decision": "THROTTLE", "X-Ratelimit-Delay-Ms": "201", "Retry-After": "", "X-Policy-Id": "shaped"} {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// TestShouldRateLimitThrottle: Envoy has no throttle: a descriptor whose
// policy (edited to THROTTLE) holds the request is OK, with the wait in
// x-ratelimit-delay-ms and x-rate-limit-decision THROTTLE.
func TestShouldRateLimitThrottle(t *testing.T) {
	c, _ := startRLSWith(t, rlsConfig, func(ps []policy.Policy) {
		for i := range ps {
			if sp, ok := envoySpec(&ps[i]); ok && sp.Name == "login" {
				ps[i].Mode, ps[i].Throttle = policy.Throttle, &policy.ThrottleConfig{MaxDelay: "1m"}
			}
		}
	})
	req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login")}}
	for i := range 3 {
		if resp := shouldRateLimit(t, c, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || header(resp, "x-rate-limit-decision") != "ALLOW" {
			t.Fatalf("request %d of the burst of 3: %v", i+1, resp)
		}
	}
	resp := shouldRateLimit(t, c, req)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || header(resp, "x-rate-limit-decision") != "THROTTLE" || header(resp, "x-ratelimit-delay-ms") != "20000" {
		t.Fatalf("4th of 3/min: %v, want OK held 20s (one interval of 3/min)", resp)
	}
}
