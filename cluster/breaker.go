package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// breaker is a per-shard circuit breaker: after a shard fails to decide
// threshold times in a row, checks on it are answered at once from their
// fail mode for a cool-down, so a sick shard does not add its timeout to
// every call. After the cool-down one probe goes through; success closes
// it, failure opens it again, and a new leader closes it at once.
//
// Only the shard's own failures count (see outcome): a caller that cancels
// or sets a short deadline must not be able to open it for everyone else.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu     sync.Mutex
	shards []breakerState // guarded by mu
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

func newBreaker(shards, threshold int, cooldown time.Duration, now func() time.Time) *breaker {
	return &breaker{threshold: max(threshold, 1), cooldown: cooldown, now: now, shards: make([]breakerState, shards)}
}

// state returns shard s's state, growing the table for shards a split
// added. Guarded by mu.
func (b *breaker) state(s int) *breakerState {
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
	st := b.state(s)
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
	st := b.state(s)
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

// reset closes shard s's breaker: it has a new leader, so the failures
// counted against the old one say nothing about it.
func (b *breaker) reset(s int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s >= 0 && s < len(b.shards) {
		b.shards[s] = breakerState{}
	}
}

// newLeader closes shard s's breaker when it has a leader again, so that
// checks stop answering from their fail mode the moment the shard can
// decide, not a cool-down later.
func (n *Node) newLeader(s int, leader raft.ServerID) {
	if b := n.breaker.Load(); b != nil && leader != "" {
		b.reset(s)
	}
}
