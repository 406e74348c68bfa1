package decide

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBreaker(2, time.Second, func() time.Time { return now })
	steps := []struct {
		do    string
		shard int
		want  bool
		after time.Duration
	}{
		{do: "allow", shard: 0, want: true},
		{do: "fail", shard: 0},
		{do: "allow", shard: 0, want: true}, // one failure of two: still closed
		{do: "neutral", shard: 0},           // a caller's own timeout: not counted
		{do: "allow", shard: 0, want: true},
		{do: "fail", shard: 0},               // the second failure opens it
		{do: "allow", shard: 0, want: false}, // open: answered at once
		{do: "allow", shard: 1, want: true},  // other shards unaffected
		{do: "allow", shard: 0, want: false, after: 999 * time.Millisecond},
		{do: "allow", shard: 0, want: true, after: time.Millisecond}, // cool-down over: one probe
		{do: "allow", shard: 0, want: false},                         // only one probe at a time
		{do: "fail", shard: 0},                                       // probe failed: open again at once
		{do: "allow", shard: 0, want: false},
		{do: "allow", shard: 0, want: true, after: time.Second},
		{do: "neutral", shard: 0},           // the probe told nothing: the next check probes
		{do: "allow", shard: 0, want: true}, // ... and is let through
		{do: "ok", shard: 0},                // probe succeeded: closed
		{do: "allow", shard: 0, want: true},
		{do: "fail", shard: 0},
		{do: "allow", shard: 0, want: true}, // the count started over
		{do: "fail", shard: 0},
		{do: "allow", shard: 0, want: false},
		{do: "reset", shard: 0},             // a new leader
		{do: "allow", shard: 0, want: true}, // closes it before the cool-down ends
		{do: "fail", shard: 0},
		{do: "allow", shard: 0, want: true}, // and clears the count
	}
	for i, s := range steps {
		now = now.Add(s.after)
		switch s.do {
		case "allow":
			if got := b.allow(s.shard); got != s.want {
				t.Fatalf("step %d: allow(%d) = %v, want %v", i, s.shard, got, s.want)
			}
		case "fail":
			b.done(s.shard, failed)
		case "ok":
			b.done(s.shard, succeeded)
		case "neutral":
			b.done(s.shard, neutral)
		case "reset":
			b.reset(s.shard)
		}
	}
}

// TestOutcomeOf: the breaker hears of the shard's failures, and never of a
// caller's cancellation or short deadline.
func TestOutcomeOf(t *testing.T) {
	ended := func(parent context.Context, cause error) context.Context {
		ctx, cancel := context.WithDeadlineCause(parent, time.Now().Add(-time.Second), cause)
		defer cancel()
		return ctx
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	plain, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	live := context.Background()
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want outcome
	}{
		{"decided", live, nil, succeeded},
		{"caller's short deadline", ended(live, errCallerBudget), errNoDecision, neutral},
		{"caller cancelled", ended(cancelled, errCheckTimeout), errNoDecision, neutral},
		{"check timeout on the node's clock", ended(live, errCheckTimeout), errNoDecision, failed},
		{"background work's own timeout", plain, errNoDecision, failed},
		{"leadership lost", live, errors.New("shard: outcome unknown: leadership lost"), failed},
		{"forwarded call broke", live, errors.New("connection reset"), failed},
		{"malformed batch", live, ErrRejected, neutral},
	}
	for _, c := range cases {
		if got := outcomeOf(c.ctx, c.err); got != c.want {
			t.Errorf("%s: outcome %d, want %d", c.name, got, c.want)
		}
	}
}

// TestCheckTimeout: the check's time is the caller's remaining time less
// the reserve, or the node's own check timeout, whichever is shorter, and
// says which.
func TestCheckTimeout(t *testing.T) {
	cases := []struct {
		name   string
		caller time.Duration // 0: no deadline
		want   time.Duration
		cause  error
	}{
		{"no deadline", 0, time.Second, errCheckTimeout},
		{"2s deadline", 2 * time.Second, time.Second, errCheckTimeout},                      // the CLI's default
		{"1.2s deadline", 1200 * time.Millisecond, time.Second, errCheckTimeout},            // 1.08s left: the timeout is first
		{"1.1s deadline", 1100 * time.Millisecond, 990 * time.Millisecond, errCallerBudget}, // 10% reserved
		{"10ms deadline", 10 * time.Millisecond, 8 * time.Millisecond, errCallerBudget},     // 2ms at least
		{"1ms deadline", time.Millisecond, -time.Millisecond, errCallerBudget},              // no time to decide
		{"past deadline", -time.Second, -time.Second - 2*time.Millisecond, errCallerBudget},
	}
	for _, c := range cases {
		d, cause := checkTimeout(c.caller, c.caller != 0, time.Second)
		if d != c.want || cause != c.cause {
			t.Errorf("%s: %v (%v), want %v (%v)", c.name, d, cause, c.want, c.cause)
		}
	}
}

// TestBreakerOpenCount: the gauge of open breakers counts shards in their
// cool-down, and none once it is over or a new leader closed them.
func TestBreakerOpenCount(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBreaker(1, time.Second, func() time.Time { return now })
	for _, s := range []int{0, 3} {
		b.allow(s)
		b.done(s, failed)
	}
	if n := b.open(); n != 2 {
		t.Fatalf("%d open, want 2", n)
	}
	b.reset(3)
	if n := b.open(); n != 1 {
		t.Fatalf("%d open after a new leader on shard 3, want 1", n)
	}
	now = now.Add(time.Second)
	if n := b.open(); n != 0 {
		t.Fatalf("%d open after the cool-down, want 0", n)
	}
}
