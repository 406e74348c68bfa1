package decide

import (
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
)

// TestJitterBounds: a retry-after is never shortened, and lengthened by at
// most a tenth, capped at a second; over many draws it varies.
func TestJitterBounds(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 800 * time.Millisecond, time.Minute} {
		seen := map[time.Duration]bool{}
		for range 200 {
			j := jitter(d)
			if j < d || j > d+min(d/10, time.Second) {
				t.Fatalf("jitter(%v) = %v; want in [d, d+min(d/10, 1s)]", d, j)
			}
			seen[j] = true
		}
		if d >= 800*time.Millisecond && len(seen) < 10 {
			t.Errorf("jitter(%v) took %d values in 200 draws; want spread", d, len(seen))
		}
	}
}

// TestEmergencyCap: the cap admits its capacity, then its rate, per bucket
// key; a full table starts afresh and counts it.
func TestEmergencyCap(t *testing.T) {
	var resets int
	c := newEmergencyCaps(func() { resets++ })
	c.max = 2
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Second}
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var ok int
	for range 15 {
		if c.allow("a", l, 1, t0, false) {
			ok++
		}
	}
	if ok != 10 {
		t.Errorf("admitted %d at one instant; want the capacity, 10", ok)
	}
	if !c.allow("a", l, 1, t0.Add(100*time.Millisecond), false) || c.allow("a", l, 1, t0.Add(100*time.Millisecond), false) {
		t.Errorf("100ms later: want exactly one more (10/s)")
	}
	for range 20 {
		if !c.allow("b", l, 1, t0, true) {
			t.Fatal("a peek at a fresh key's cap was refused")
		}
	}
	if !c.allow("b", l, 10, t0, false) {
		t.Errorf("peeks took from the cap: 10 refused after 20 peeks")
	}
	c.allow("c", l, 1, t0, false)
	if resets != 1 {
		t.Errorf("resets = %d after a third key in a table of 2; want 1", resets)
	}
}

// TestRequestDecisionIgnoresSoft: only hard items deny the request.
func TestRequestDecisionIgnoresSoft(t *testing.T) {
	deny := Result{Decision: Deny, Reason: OverLimit}
	allow := Result{Decision: Allow, Reason: WithinLimit}
	if d := requestDecision([]item{{}, {soft: true}}, []Result{allow, deny}); d != Allow {
		t.Errorf("a soft denial denied the request")
	}
	if d := requestDecision([]item{{soft: true}, {}}, []Result{allow, deny}); d != Deny {
		t.Errorf("a hard denial did not deny the request")
	}
}

// TestExplainResults: the deciding policy and the reason of a descriptor
// check, from its policies' verdicts.
func TestExplainResults(t *testing.T) {
	over := func() Result { return Result{Decision: Deny, Reason: OverLimit} }
	ok := func(rem int64) Result { return Result{Decision: Allow, Reason: WithinLimit, Remaining: rem} }
	down := func() Result { return Result{Decision: Deny, Reason: Unavailable} }
	ev := func(id string, m policy.Mode, first int) evaluated {
		return evaluated{ev: policy.Evaluation{PolicyID: id, Mode: m, Items: []policy.Item{{Name: id}}}, first: first}
	}
	for _, tt := range []struct {
		name       string
		evs        []evaluated
		results    []Result
		decision   Decision
		wantID     string
		wantReason Reason
	}{
		{"tightest hard decides an allow", []evaluated{ev("a", policy.Hard, 0), ev("b", policy.Hard, 1)},
			[]Result{ok(9), ok(2)}, Allow, "b", WithinLimit},
		{"the denying hard policy decides", []evaluated{ev("a", policy.Hard, 0), ev("b", policy.Hard, 1)},
			[]Result{over(), ok(2)}, Deny, "a", OverLimit},
		{"a shadow alone names no policy", []evaluated{ev("s", policy.Shadow, 0)},
			[]Result{over()}, Allow, "", ShadowWouldDeny},
		{"a soft alone is named", []evaluated{ev("s", policy.Shadow, 0), ev("f", policy.Soft, 1)},
			[]Result{ok(1), over()}, Allow, "f", OverLimitSoft},
		{"a soft policy's outage is not over its limit", []evaluated{ev("h", policy.Hard, 0), ev("f", policy.Soft, 1)},
			[]Result{ok(5), down()}, Allow, "h", WithinLimit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := New(Config{})
			ans := &Answer{Decision: tt.decision, Results: tt.results}
			e.explain(ans, tt.evs)
			if ans.AppliedPolicyID != tt.wantID || ans.Reason != tt.wantReason {
				t.Errorf("applied %q, reason %v; want %q, %v", ans.AppliedPolicyID, ans.Reason, tt.wantID, tt.wantReason)
			}
		})
	}
}
