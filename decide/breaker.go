package decide

import (
	"context"
	"errors"
	"sync"
	"time"
)

// breaker is a per-shard circuit breaker: after a shard fails to decide
// threshold times in a row, checks on it are answered at once from their
// fail mode for a cool-down, so a sick shard does not add its timeout to
// every call. After the cool-down one probe goes through; success closes
// it, failure opens it again, and a new leader closes it at once.
//
// Only the shard's own failures count (see outcomeOf): a caller that
// cancels or sets a short deadline must not be able to open it for
// everyone else.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu     sync.Mutex
	shards []breakerState // guarded by mu; grows as shards are seen
}

type breakerState struct {
	failures int       // shard failures since the last success
	until    time.Time // open until then; zero while closed
	probe    bool      // a probe is in flight
}

// outcome is what one submit says about its shard's health.
type outcome int

const (
	// neutral: nothing learned (the caller gave up, or its own short
	// deadline ran out first).
	neutral outcome = iota
	succeeded
	// failed: no leader or no quorum within the node's own check timeout,
	// leadership lost under the command, or the leader's commit timed out
	// on this node's clock.
	failed
)

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time) *breaker {
	return &breaker{threshold: max(threshold, 1), cooldown: cooldown, now: now}
}

// stateLocked returns shard s's state, growing the table for shards not
// seen yet (a split adds shards).
func (b *breaker) stateLocked(s int) *breakerState {
	if s >= len(b.shards) {
		b.shards = append(b.shards, make([]breakerState, s+1-len(b.shards))...)
	}
	return &b.shards[s]
}

// allow reports whether a check may try shard s now. A true answer must be
// followed by done.
func (b *breaker) allow(s int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.stateLocked(s)
	if st.until.IsZero() {
		return true
	}
	if b.now().Before(st.until) || st.probe {
		return false
	}
	st.probe = true
	return true
}

// done records the outcome of a submit that allow let through.
func (b *breaker) done(s int, o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.stateLocked(s)
	probing := st.probe
	st.probe = false
	switch o {
	case succeeded:
		*st = breakerState{}
	case failed:
		st.failures++
		if st.failures >= b.threshold || probing {
			st.until = b.now().Add(b.cooldown)
		}
	}
}

// reset closes shard s's breaker: it has a new leader.
func (b *breaker) reset(s int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s >= 0 && s < len(b.shards) {
		b.shards[s] = breakerState{}
	}
}

// outcomeOf classifies a submit's result for the breaker. A context that
// ended counts against the shard only when its deadline was the node's own
// (errCheckTimeout, or a plain deadline of the node's background work such
// as lease renewals), never when the caller cancelled or its short
// deadline ran out.
func outcomeOf(ctx context.Context, err error) outcome {
	if err == nil {
		return succeeded
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(cause, errCallerBudget) || errors.Is(cause, context.Canceled) {
			return neutral
		}
		return failed
	}
	if errors.Is(err, ErrRejected) {
		return neutral // a malformed batch: a bug to fix, not the shard's health
	}
	// Leadership lost under the command, the shard closing, or a forwarded
	// call that failed in flight while this check still had time: a
	// forward carries this check's deadline, so a peer's timeout cannot
	// come back before this context ends.
	return failed
}

// open counts the shards whose breaker is open now (not probing yet).
func (b *breaker) open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	now, n := b.now(), 0
	for i := range b.shards {
		if u := b.shards[i].until; !u.IsZero() && now.Before(u) {
			n++
		}
	}
	return n
}
