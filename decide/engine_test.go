package decide

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/ring"
)

// TestStrictDenialRefundsEveryShard: a request whose items live on three
// shards is denied by the third; what the first two allowed is given back
// on both of them (a compensating Refund each), so their buckets are full
// again, and their items say Refunded.
func TestStrictDenialRefundsEveryShard(t *testing.T) {
	c := newClock()
	f := newShards(t, 3, c)
	e := engine(f, c, nil)
	keys := [3]string{keyOn(t, f.ring, "api", 0), keyOn(t, f.ring, "api", 1), keyOn(t, f.ring, "tight", 2)}
	tight := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1, Period: time.Hour}
	if r := f.take(2, ring.BucketKey("tight", keys[2]), tight, 1); !r.Allowed {
		t.Fatal("could not exhaust the tight bucket")
	}
	ans, err := e.Check(context.Background(), &Request{Items: []Item{
		tbItem("api", keys[0], 10), tbItem("api", keys[1], 10), tbItem("tight", keys[2], 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != Deny || ans.Reason != OverLimit {
		t.Fatalf("decision %v %v, want deny over_limit", ans.Decision, ans.Reason)
	}
	for s := range 2 {
		if r := ans.Results[s]; r.Decision != Deny || r.Reason != Refunded || r.Shard != s {
			t.Errorf("item on shard %d: %+v, want denied as refunded", s, r)
		}
		if r := f.peek(s, ring.BucketKey("api", keys[s]), tb10); r.Remaining != 10 {
			t.Errorf("shard %d's bucket has %d left after the refund, want all 10", s, r.Remaining)
		}
	}
	if r := ans.Results[2]; r.Reason != OverLimit {
		t.Errorf("the tight item: %+v, want over_limit", r)
	}
}

// TestStrictDenialOnOneShardRefundsInTheEntry: items that share the
// denying shard are given back in the same entry (all-or-nothing), with
// no compensating refund.
func TestStrictDenialOnOneShardRefundsInTheEntry(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, nil)
	tight := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1, Period: time.Hour}
	f.take(0, ring.BucketKey("tight", "x"), tight, 1)
	ans, err := e.Check(context.Background(), &Request{Items: []Item{tbItem("api", "a", 10), tbItem("tight", "x", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != Deny || ans.Results[0].Reason != Refunded {
		t.Fatalf("%+v, want the first item refunded", ans)
	}
	if r := f.peek(0, ring.BucketKey("api", "a"), tb10); r.Remaining != 10 {
		t.Errorf("%d left, want 10", r.Remaining)
	}
	if n := f.submits(0); n != 1 {
		t.Errorf("%d submits, want the one entry", n)
	}
}

// TestLeasedDenialRefundsLocalAndStrict: a leased request whose third
// bucket is exhausted gives back what it spent from the lease table (the
// node holds its budget again) and what another shard decided strictly
// because the grant there failed.
func TestLeasedDenialRefundsLocalAndStrict(t *testing.T) {
	c := newClock()
	f := newShards(t, 3, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { leased(cfg); cfg.Observer = obs })
	defer e.Close()
	keys := [3]string{keyOn(t, f.ring, "api", 0), keyOn(t, f.ring, "api", 1), keyOn(t, f.ring, "tight", 2)}
	tight := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1, Period: time.Hour}
	f.take(2, ring.BucketKey("tight", keys[2]), tight, 1)
	f.noGrants[1] = true // shard 1's item falls back to a strict check

	warm, err := e.Check(context.Background(), &Request{Mode: Leased, Items: []Item{tbItem("api", keys[0], 10)}})
	if err != nil || warm.Decision != Allow {
		t.Fatalf("warming the lease: %+v %v", warm, err)
	}
	held := e.Leases().Held()
	ans, err := e.Check(context.Background(), &Request{Mode: Leased, Items: []Item{
		tbItem("api", keys[0], 10), tbItem("api", keys[1], 10), tbItem("tight", keys[2], 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != Deny {
		t.Fatalf("decision %v, want deny", ans.Decision)
	}
	for i := range 2 {
		if r := ans.Results[i]; r.Reason != Refunded {
			t.Errorf("item %d: %+v, want refunded", i, r)
		}
	}
	if got := e.Leases().Held(); got != held {
		t.Errorf("the node holds %d after the denied request, want %d (the local spend given back)", got, held)
	}
	if r := f.peek(1, ring.BucketKey("api", keys[1]), tb10); r.Remaining != 10 {
		t.Errorf("shard 1's bucket has %d left, want 10: its strict take was not refunded", r.Remaining)
	}
	if obs.get("lease-fallback") != 1 {
		t.Errorf("lease fallbacks %d, want 1", obs.get("lease-fallback"))
	}
}

// TestRerouteAfterSplit: an item that reaches a fenced parent (the split
// moved its range) waits for the routing and is decided once, at the
// child; a refund of a rerouted item goes to the child too.
func TestRerouteAfterSplit(t *testing.T) {
	c := newClock()
	f := newShards(t, 2, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cfg.Observer = obs; cfg.CheckTimeout = 5 * time.Second })
	lo, hi, _ := f.ring.Routed(1)
	move := f.fence(t, 1, lo+(hi-lo)/2+1)
	moved := keyIn(t, "api", move)
	key := ring.BucketKey("api", moved)
	kept := keyIn(t, "api", fsm.Range{Lo: lo, Hi: move.Lo - 1})
	// The split finishes while the check waits, as the mover does it:
	// once the parent has refused the range.
	f.after = func(s int, a Applied) {
		if s == 1 && len(a.Results) > 0 && errors.Is(a.Results[0].Err, fsm.ErrMoved) {
			go func() {
				if err := f.adopt(1, 2, move); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	// Both items are one all-or-nothing group on the parent, which rolls
	// the whole group back when one of them moved: the kept one is decided
	// again at the parent, the moved one at the child.
	ans, err := e.Check(context.Background(), &Request{Items: []Item{tbItem("api", moved, 10), tbItem("api", kept, 10)}})
	if err != nil {
		t.Fatal(err)
	}
	if r := ans.Results[0]; ans.Decision != Allow || r.Shard != 2 || r.Remaining != 9 {
		t.Fatalf("%+v, want allowed by the child (shard 2) with 9 left", r)
	}
	if r := ans.Results[1]; r.Decision != Allow || r.Shard != 1 || r.Remaining != 9 {
		t.Fatalf("the kept item: %+v, want allowed by the parent with 9 left", r)
	}
	if r := f.peek(1, ring.BucketKey("api", kept), tb10); r.Remaining != 9 {
		t.Errorf("the parent's bucket of the kept key has %d left, want 9", r.Remaining)
	}
	if n := f.takesOf(2, key); n != 1 {
		t.Errorf("the child was sent %d takes of the key, want 1", n)
	}
	if r := f.peek(2, key, tb10); r.Remaining != 9 {
		t.Errorf("the child's bucket has %d left, want 9: decided more than once", r.Remaining)
	}
	if obs.get("rerouted/sent") != 2 {
		t.Errorf("rerouted %d, want the group's 2 items", obs.get("rerouted/sent"))
	}

	// Now deny a request with the moved key and a full bucket on shard 0:
	// the refund must reach the child.
	f.after = nil
	tight := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1, Period: time.Hour}
	k0 := keyOn(t, f.ring, "tight", 0)
	f.take(0, ring.BucketKey("tight", k0), tight, 1)
	ans, err = e.Check(context.Background(), &Request{Items: []Item{tbItem("api", moved, 10), tbItem("tight", k0, 1)}})
	if err != nil || ans.Decision != Deny {
		t.Fatalf("%+v %v, want deny", ans, err)
	}
	if r := f.peek(2, key, tb10); r.Remaining != 9 {
		t.Errorf("the child's bucket has %d left after the refund, want 9", r.Remaining)
	}
}

// TestRerouteExpires: a fenced range whose routing never changes is
// answered by the items' fail modes when the check's time is up.
func TestRerouteExpires(t *testing.T) {
	c := newClock()
	f := newShards(t, 2, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cfg.Observer = obs })
	lo, hi, _ := f.ring.Routed(1)
	move := f.fence(t, 1, lo+(hi-lo)/2+1)
	it := tbItem("api", keyIn(t, "api", move), 10)
	it.Fail = FailClosedMode
	ans, err := e.Check(context.Background(), &Request{Items: []Item{it}})
	if err != nil {
		t.Fatal(err)
	}
	if r := ans.Results[0]; r.Reason != Unavailable {
		t.Errorf("%+v, want the fail mode's answer", r)
	}
	if obs.get("rerouted/expired") != 1 {
		t.Errorf("expired %d, want 1", obs.get("rerouted/expired"))
	}
}

// TestFailModes: a shard without a leader answers each item by its own
// fail mode: open allows, closed denies with the breaker's cool-down as
// the retry, and nothing is consumed anywhere.
func TestFailModes(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cfg.Observer = obs; cfg.BreakerCooldown = 700 * time.Millisecond })
	f.setDown(0, true)
	for _, tt := range []struct {
		fail   FailMode
		want   Decision
		reason Reason
	}{
		{FailDefault, Allow, FailOpen},
		{FailOpenMode, Allow, FailOpen},
		{FailClosedMode, Deny, Unavailable},
	} {
		it := tbItem("api", "k", 10)
		it.Fail = tt.fail
		ans, err := e.Check(context.Background(), &Request{Items: []Item{it}})
		if err != nil {
			t.Fatal(err)
		}
		r := ans.Results[0]
		if ans.Decision != tt.want || r.Reason != tt.reason {
			t.Errorf("fail %d: %v %v, want %v %v", tt.fail, ans.Decision, r.Reason, tt.want, tt.reason)
		}
		if tt.fail == FailClosedMode && r.RetryAfter != 700*time.Millisecond {
			t.Errorf("fail closed: retry after %v, want the cool-down", r.RetryAfter)
		}
	}
	// Mixed: the closed item denies the request; the open one is not
	// counted as consumed (nothing was).
	open, closed := tbItem("api", "a", 10), tbItem("api", "b", 10)
	closed.Fail = FailClosedMode
	ans, err := e.Check(context.Background(), &Request{Items: []Item{open, closed}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != Deny || ans.Results[0].Reason != FailOpen || ans.Results[1].Reason != Unavailable {
		t.Errorf("mixed: %+v", ans)
	}
	if obs.get("fail/open") != 3 || obs.get("fail/closed") != 2 {
		t.Errorf("fail modes counted %v", obs.counts)
	}
	f.setDown(0, false)
	if r := f.peek(0, ring.BucketKey("api", "k"), tb10); r.Remaining != 10 {
		t.Errorf("%d left, want 10", r.Remaining)
	}
}

// TestBreakerOpensAndCloses: failures of a shard in a row open its
// breaker, which then answers without trying the shard; after the
// cool-down one probe goes through; a new leader closes it at once.
func TestBreakerOpensAndCloses(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, func(cfg *Config) { cfg.BreakerFailures = 2; cfg.BreakerCooldown = time.Second })
	check := func() Reason {
		t.Helper()
		ans, err := e.Check(context.Background(), &Request{Items: []Item{tbItem("api", "k", 10)}})
		if err != nil {
			t.Fatal(err)
		}
		return ans.Results[0].Reason
	}
	f.setDown(0, true)
	for i := range 2 {
		if r := check(); r != FailOpen {
			t.Fatalf("check %d: %v, want fail_open", i, r)
		}
	}
	tried := f.submits(0)
	if r := check(); r != FailOpen || f.submits(0) != tried {
		t.Fatalf("open breaker: %v, %d submits (was %d), want fail_open without trying", r, f.submits(0), tried)
	}
	c.Advance(time.Second) // the cool-down ends: one probe, which fails
	if check(); f.submits(0) != tried+1 {
		t.Fatalf("after the cool-down: %d submits, want one probe (%d)", f.submits(0), tried+1)
	}
	if check(); f.submits(0) != tried+1 {
		t.Fatalf("after the failed probe: %d submits, want the breaker open again", f.submits(0))
	}
	f.setDown(0, false)
	e.LeaderChanged(0)
	if r := check(); r != WithinLimit {
		t.Fatalf("after a new leader: %v, want within_limit", r)
	}
}

// TestEmergencyCapBoundsFailOpen: while its shard cannot decide, a
// fail-open policy with an emergency cap admits the cap, then denies; one
// without admits everything; a fail-closed one denies at once.
func TestEmergencyCapBoundsFailOpen(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	pol := compile(t, `
policies:
  - policy_id: capped
    scope: { tenant_tier: CAPPED }
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 100/min } }]
    fail_behavior: FAIL_OPEN
    emergency_cap: 3/h
  - policy_id: open
    scope: { tenant_tier: OPEN }
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 100/min } }]
    fail_behavior: FAIL_OPEN
  - policy_id: closed
    scope: { tenant_tier: CLOSED }
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 100/min } }]
    fail_behavior: FAIL_CLOSED
`)
	e := engine(f, c, func(cfg *Config) { cfg.Policies = pol; cfg.CheckTimeout = 20 * time.Millisecond })
	f.setDown(0, true)
	allowed := map[string]int{}
	for range 6 {
		for _, tier := range []string{"CAPPED", "OPEN", "CLOSED"} {
			ans, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "t1", TenantTier: tier}})
			if err != nil {
				t.Fatal(err)
			}
			if ans.Decision == Allow {
				allowed[tier]++
			}
		}
	}
	if allowed["CAPPED"] != 3 || allowed["OPEN"] != 6 || allowed["CLOSED"] != 0 {
		t.Errorf("admitted of 6 while the shard is down: %v; want CAPPED 3, OPEN 6, CLOSED 0", allowed)
	}
	c.Advance(20 * time.Minute) // the cap refills at 3/h
	ans, _ := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "t1", TenantTier: "CAPPED"}})
	if ans.Decision != Allow {
		t.Errorf("20 minutes later the cap has refilled one: %+v", ans)
	}
}

// TestSpentDeadlineNotTried: a strict check whose caller's deadline is
// inside the reserve is refused at once (ErrNoTime): it is neither tried
// nor answered by the fail mode (which would count as the shard's
// unavailability).
func TestSpentDeadlineNotTried(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cfg.Observer = obs })
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := e.Check(ctx, &Request{Items: []Item{tbItem("api", "k", 10)}})
	if !errors.Is(err, ErrNoTime) {
		t.Fatalf("1ms deadline: %v, want ErrNoTime", err)
	}
	if f.submits(0) != 0 || obs.get("fail/open") != 0 {
		t.Fatalf("%d submits, %d fail-open answers; want none", f.submits(0), obs.get("fail/open"))
	}
}

// TestNoCluster: without routing (not bootstrapped) a check is refused.
func TestNoCluster(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	f.ring = nil
	if _, err := engine(f, c, nil).Check(context.Background(), &Request{Items: []Item{tbItem("api", "k", 10)}}); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("%v, want ErrNoCluster", err)
	}
}

// TestIdempotentReplayNotRefunded: a replayed take belongs to the first
// request; a later denied request must not give its unit back.
func TestIdempotentReplayNotRefunded(t *testing.T) {
	c := newClock()
	f := newShards(t, 2, c)
	e := engine(f, c, nil)
	k0, k1 := keyOn(t, f.ring, "api", 0), keyOn(t, f.ring, "tight", 1)
	it := tbItem("api", k0, 10)
	it.IdempotencyKey = "req-1"
	if ans, err := e.Check(context.Background(), &Request{Items: []Item{it}}); err != nil || ans.Decision != Allow {
		t.Fatalf("first: %+v %v", ans, err)
	}
	tight := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1, Period: time.Hour}
	f.take(1, ring.BucketKey("tight", k1), tight, 1)
	ans, err := e.Check(context.Background(), &Request{Items: []Item{it, tbItem("tight", k1, 1)}})
	if err != nil || ans.Decision != Deny {
		t.Fatalf("retry: %+v %v", ans, err)
	}
	if r := f.peek(0, ring.BucketKey("api", k0), tb10); r.Remaining != 9 {
		t.Errorf("%d left, want 9: the replay refunded the first request's unit", r.Remaining)
	}
}
