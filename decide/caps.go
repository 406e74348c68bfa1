package decide

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/quorate/quorate/fsm"
)

// emergencyCaps are the node-local limits that bound fail-open admissions
// of policies with an emergency_cap while their shard cannot decide. Each
// node enforces its own: the cluster-wide bound is the cap times the nodes.
type emergencyCaps struct {
	mu struct {
		sync.Mutex
		m map[string]*rate.Limiter // by bucket key
	}
	max  int
	shed func() // counts a reset of a full table
}

// maxEmergencyCaps bounds the table; a full table starts afresh (counted),
// which can only admit more during an outage, never decide a healthy shard.
const maxEmergencyCaps = 10_000

func newEmergencyCaps(shed func()) *emergencyCaps {
	c := &emergencyCaps{max: maxEmergencyCaps, shed: shed}
	c.mu.m = map[string]*rate.Limiter{}
	return c
}

// allow reports whether the cap l lets this node admit cost more units of
// key at now; with peek (a dry run) it takes nothing.
func (c *emergencyCaps) allow(key string, l fsm.Limit, cost int64, now time.Time, peek bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	lim, ok := c.mu.m[key]
	if !ok {
		if len(c.mu.m) >= c.max {
			c.mu.m = map[string]*rate.Limiter{}
			c.shed()
		}
		every := rate.Limit(float64(l.Limit) / l.Period.Seconds())
		lim = rate.NewLimiter(every, int(min(l.Capacity(), 1<<30)))
		c.mu.m[key] = lim
	}
	if peek {
		return lim.TokensAt(now) >= float64(cost)
	}
	return lim.AllowN(now, int(min(cost, 1<<30)))
}
