package cluster

import (
	"sync"
	"time"
)

// breaker is a per-shard circuit breaker: after a shard fails to decide
// within a check's deadline, checks on it are answered at once from their
// fail mode for a cool-down, so a sick shard does not add its timeout to
// every call. After the cool-down one probe goes through; success closes it.
type breaker struct {
	cooldown time.Duration
	now      func() time.Time

	mu    sync.Mutex
	until []time.Time // guarded by mu: per shard, open until then
	probe []bool      // guarded by mu: per shard, a probe is in flight
}

func newBreaker(shards int, cooldown time.Duration, now func() time.Time) *breaker {
	return &breaker{cooldown: cooldown, now: now, until: make([]time.Time, shards), probe: make([]bool, shards)}
}

// allow reports whether a check may try shard s now.
func (b *breaker) allow(s int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.until[s].IsZero() {
		return true
	}
	if b.now().Before(b.until[s]) || b.probe[s] {
		return false
	}
	b.probe[s] = true
	return true
}

// failure opens the breaker for shard s.
func (b *breaker) failure(s int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.until[s] = b.now().Add(b.cooldown)
	b.probe[s] = false
}

// success closes the breaker for shard s.
func (b *breaker) success(s int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.until[s] = time.Time{}
	b.probe[s] = false
}
