package decide

import (
	"context"
	"testing"
	"time"
)

const throttled = `
policies:
  - policy_id: shaped
    key: [tenant_id]
    algorithm: GCRA
    config: { rate: 10/s, burst: 1 }
    mode: THROTTLE
    throttle: { max_delay: 1s }
  - policy_id: bursty
    key: [user_id]
    algorithm: TOKEN_BUCKET
    config: { rate: 10/s, capacity: 5 }
    mode: THROTTLE
    throttle: { max_delay: 300ms }
  - policy_id: soft
    key: [api_key_id]
    algorithm: SLIDING_WINDOW
    config: { limit: 5/s }
    mode: SOFT
    throttle: { friction: 50ms, max_delay: 200ms }
  - policy_id: risky
    key: [ip]
    algorithm: GCRA
    config: { rate: 10/s, burst: 2 }
    throttle: { max_delay: 500ms }
    risk: { bands: [ { min: 0.8, cut: 0, action: THROTTLE } ] }
  - policy_id: tight
    key: [custom.session]
    algorithm: TOKEN_BUCKET
    config: { limit: 1/h }
`

type step struct {
	d     Decision
	r     Reason
	delay time.Duration
}

// throttleEngine's shards are always up: its checks have time enough that
// a busy machine cannot make one fail open, which these tests do not test.
func throttleEngine(t *testing.T) (*Engine, *manualClock, *countingObserver) {
	e, c, obs, _ := throttleEngineShards(t, 10*time.Second)
	return e, c, obs
}

func throttleEngineShards(t *testing.T, timeout time.Duration) (*Engine, *manualClock, *countingObserver, *fakeShards) {
	c := newClock()
	f := newShards(t, 2, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) {
		cfg.Policies, cfg.Observer, cfg.CheckTimeout = compile(t, throttled), obs, timeout
	})
	t.Cleanup(e.Close)
	return e, c, obs, f
}

func checkSteps(t *testing.T, e *Engine, d *Descriptors, want []step) {
	t.Helper()
	for i, w := range want {
		dd := *d
		ans, err := e.Check(context.Background(), &Request{Descriptors: &dd})
		if err != nil {
			t.Fatal(err)
		}
		if ans.Decision != w.d || ans.Reason != w.r || ans.Delay() != w.delay {
			t.Errorf("request %d: %s %s delay %s, want %s %s delay %s", i, ans.Decision, ans.Reason, ans.Delay(), w.d, w.r, w.delay)
		}
	}
}

// TestThrottleShapesABurst: a burst of 13 requests at one instant to a
// 10/s THROTTLE policy with burst 1 and max_delay 1s gets the delays 0,
// 100ms, ... 1s, which space them 100ms apart, and the 12th and 13th are
// denied; 550ms later the queue holds 550ms of waits.
func TestThrottleShapesABurst(t *testing.T) {
	e, c, obs := throttleEngine(t)
	want := []step{{Allow, WithinLimit, 0}}
	for k := 1; k <= 10; k++ {
		want = append(want, step{Throttle, Throttled, time.Duration(k) * 100 * time.Millisecond})
	}
	want = append(want, step{Deny, OverLimit, 0}, step{Deny, OverLimit, 0})
	checkSteps(t, e, &Descriptors{TenantID: "t1"}, want)

	c.Advance(550 * time.Millisecond)
	checkSteps(t, e, &Descriptors{TenantID: "t1"}, []step{{Throttle, Throttled, 550 * time.Millisecond}})

	if n := obs.get("request/strict/throttle"); n != 11 {
		t.Errorf("%d requests counted as throttle, want 11", n)
	}
	if n := obs.get("policy/shaped/throttled"); n != 11 {
		t.Errorf("%d throttled outcomes of policy shaped, want 11", n)
	}
	if n := obs.get("item/strict/throttle/throttled"); n != 11 {
		t.Errorf("%d throttled items, want 11", n)
	}
}

// TestThrottleAnswer: a throttled answer's numbers are the policy's: its
// capacity, not the shaper's queue; the denial past max_delay says when
// the request would fit.
func TestThrottleAnswer(t *testing.T) {
	e, _, _ := throttleEngine(t)
	d := &Descriptors{UserID: "u1"}
	// Capacity 5 passes at once; then 100ms, 200ms, 300ms; then denied.
	checkSteps(t, e, d, []step{
		{Allow, WithinLimit, 0}, {Allow, WithinLimit, 0}, {Allow, WithinLimit, 0}, {Allow, WithinLimit, 0}, {Allow, WithinLimit, 0},
		{Throttle, Throttled, 100 * time.Millisecond}, {Throttle, Throttled, 200 * time.Millisecond}, {Throttle, Throttled, 300 * time.Millisecond},
	})
	ans, err := e.Check(context.Background(), &Request{Descriptors: d})
	if err != nil {
		t.Fatal(err)
	}
	pr, _, ok := ans.Deciding()
	if ans.Decision != Deny || !ok || pr.PolicyID != "bursty" || pr.Limit != 5 || pr.Remaining != 0 {
		t.Fatalf("past max_delay: %s, deciding %+v, want deny by bursty with limit 5", ans.Decision, pr)
	}
	if pr.RetryAfter < 100*time.Millisecond || pr.RetryAfter > 111*time.Millisecond {
		t.Errorf("retry after %s, want the 100ms until a turn within max_delay (+ up to 10%% jitter)", pr.RetryAfter)
	}
}

// TestSoftFriction: a SOFT policy over its limit is never denied: each
// unit over adds 50ms, and a full queue answers the most, 200ms.
func TestSoftFriction(t *testing.T) {
	e, _, obs := throttleEngine(t)
	want := []step{}
	for range 5 {
		want = append(want, step{Allow, WithinLimit, 0})
	}
	for k := 1; k <= 4; k++ {
		want = append(want, step{Throttle, OverLimitSoft, time.Duration(k) * 50 * time.Millisecond})
	}
	want = append(want, step{Throttle, OverLimitSoft, 200 * time.Millisecond}, step{Throttle, OverLimitSoft, 200 * time.Millisecond})
	checkSteps(t, e, &Descriptors{APIKeyID: "k1"}, want)
	if n := obs.get("policy/soft/throttled"); n != 6 {
		t.Errorf("%d throttled outcomes of the soft policy, want 6", n)
	}
}

// TestRiskBandThrottles: a HARD policy throttles the requests of a band
// with action THROTTLE and denies the others past its burst.
func TestRiskBandThrottles(t *testing.T) {
	e, _, _ := throttleEngine(t)
	checkSteps(t, e, &Descriptors{IP: "192.0.2.1"}, []step{{Allow, WithinLimit, 0}, {Allow, WithinLimit, 0}, {Deny, OverLimit, 0}})
	risk := 0.9
	checkSteps(t, e, &Descriptors{IP: "192.0.2.1", RiskScore: &risk}, []step{
		{Allow, WithinLimit, 0}, {Allow, WithinLimit, 0}, {Throttle, Throttled, 100 * time.Millisecond},
	})
}

// TestThrottleRefunded: a request another policy denies gives its place
// in the queue back, so the next one waits as if it had not come.
func TestThrottleRefunded(t *testing.T) {
	e, _, _ := throttleEngine(t)
	both := &Descriptors{TenantID: "t1", Custom: map[string]string{"session": "s1"}}
	checkSteps(t, e, both, []step{{Allow, WithinLimit, 0}, {Deny, OverLimit, 0}, {Deny, OverLimit, 0}})
	checkSteps(t, e, &Descriptors{TenantID: "t1"}, []step{{Throttle, Throttled, 100 * time.Millisecond}})
}

// TestThrottleFailOpen: a throttled bucket whose shard cannot decide fails
// open as any bucket does: admitted at once, with the policy's capacity
// as its limit (not the shaper's queue).
func TestThrottleFailOpen(t *testing.T) {
	e, _, _, f := throttleEngineShards(t, 50*time.Millisecond)
	f.setDown(0, true)
	f.setDown(1, true)
	ans, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != Allow || ans.Reason != FailOpen || ans.Delay() != 0 || ans.Policies[0].Limit != 1 {
		t.Fatalf("%s %s delay %s limit %d; want allow fail_open, no delay, limit 1", ans.Decision, ans.Reason, ans.Delay(), ans.Policies[0].Limit)
	}
}
