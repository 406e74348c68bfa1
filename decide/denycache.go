package decide

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/ring"
)

// The deny cache answers a strict check of a bucket that its shard denied
// moments ago without asking the shard again: a hot key over its limit
// would otherwise cost a Raft commit per check, only to hear what the last
// one heard. A denial is remembered until its retry-after, for the cost it
// was denied at (and so any larger one), under the limit and policy version
// it was decided with. Only denials are remembered, so the cache can never
// admit; at worst it denies a check that the bucket, given room this node
// could not see, would have allowed.
//
// What gives a bucket room early, and how the cache learns of it:
//   - this node's refunds (in the deciding entry or across shards) drop the
//     bucket's entry, and so does a take its shard allowed after the
//     denial, which shows the bucket has room the entry does not know of;
//   - a policy change: an entry holds for one policy version only;
//   - a larger limit, or a smaller cost, looks up as a miss.
//
// What it cannot see: refunds and lease returns that other nodes (or
// gateways) make on the bucket, and a new shard leader whose clock runs
// ahead of the old one's. Each can make the cache deny, until the
// remembered retry-after, a check an exact limiter would have allowed.

// DenyCacheObserver is an Observer that also counts the deny cache's work
// (Config.DenyCache). The engine finds it by type assertion, so observers
// written before the cache need not change.
type DenyCacheObserver interface {
	// DenyCache counts n events by outcome: "hit" (a strict item answered
	// from a remembered denial), "miss" (looked up, none that holds),
	// "stored", "evicted" (the cache was full: its least recently used
	// entry made room) or "dropped" (an entry gone stale: a refund, or a
	// take the shard allowed since).
	DenyCache(outcome string, n int)
}

// denyCache remembers strict denials. Its LRU is safe for concurrent use;
// the cache adds no state of its own.
type denyCache struct {
	// entries are keyed by keyhash.Sum of the bucket key, as the state
	// machine keys its buckets: two keys of one hash share a bucket there,
	// and so a denial here.
	entries *lru.Cache[uint64, denial]
	count   func(outcome string, n int)
}

// denial is one remembered denial: the bucket denied cost (and so any more)
// under limit and policy version, until sent+retry on this node's clock.
type denial struct {
	limit   fsm.Limit
	version uint64
	cost    int64
	shard   int
	// sent is when the denied check was sent to the shard and recv when
	// its answer came back: the shard decided in between. Until sent+retry
	// the bucket cannot have refilled enough (the state machine's time
	// runs no faster than this node's); DecidedAt counts from sent, so
	// that a cached answer's time stays before the denial's end, and
	// retry-after from recv, so that it is never shorter than the wait.
	sent, recv time.Time
	retry      time.Duration // the shard's, before jitter
	decidedAt  int64         // the state machine's time of the denial (Unix ns)
	remaining  int64
	resetAfter time.Duration
	capacity   int64
}

func newDenyCache(size int, obs Observer) *denyCache {
	if size <= 0 {
		return nil
	}
	entries, err := lru.New[uint64, denial](size)
	if err != nil {
		return nil // unreachable: size is positive
	}
	c := &denyCache{entries: entries, count: func(string, int) {}}
	if o, ok := obs.(DenyCacheObserver); ok {
		c.count = o.DenyCache
	}
	return c
}

// cacheable: only a hard Take can be denied from the cache. A soft or
// shadow item never denies its request, a dry run's peek must show the
// bucket as it is, and a retry under an idempotency key must get its
// first answer, which may have been an allow.
func cacheable(it *item) bool {
	// A throttled bucket is a shaper whose queue the answer's delay
	// depends on: always its shard's.
	return it.op.Kind == fsm.OpTake && !it.soft && it.op.IdempotencyKey == "" && !it.delay.Throttled()
}

// answer decides a strict request from the cache when it can: when every
// item is cacheable and at least one is remembered denied at now. The
// request is then denied as its shard would deny it, all-or-nothing: the
// remembered items over their limit, the others untried, reported as
// refunded (they consumed nothing).
func (c *denyCache) answer(r *ring.Ring, items []item, now time.Time) ([]Result, bool) {
	for i := range items {
		if !cacheable(&items[i]) {
			return nil, false
		}
	}
	var results []Result
	hits := 0
	for i := range items {
		d, ok := c.lookup(&items[i], now)
		if !ok {
			continue
		}
		if results == nil {
			results = make([]Result, len(items))
		}
		results[i] = d.result(now)
		hits++
	}
	c.count("miss", len(items)-hits)
	if hits == 0 {
		return nil, false
	}
	c.count("hit", hits)
	for i := range results {
		if results[i].Decision == 0 {
			results[i] = untried(r, &items[i], now)
		}
	}
	return results, true
}

// lookup finds a denial that holds for it at now.
func (c *denyCache) lookup(it *item, now time.Time) (denial, bool) {
	d, ok := c.entries.Get(keyhash.Sum(it.op.Key))
	if !ok || d.limit != it.op.Limit || d.version != it.version || it.op.Cost < d.cost || now.Sub(d.sent) >= d.retry {
		return denial{}, false
	}
	return d, true
}

func (d *denial) result(now time.Time) Result {
	waited := now.Sub(d.recv)
	return Result{
		Decision: Deny, Reason: OverLimit, Cached: true,
		Limit: d.capacity, Remaining: d.remaining,
		ResetAfter: max(0, d.resetAfter-waited), RetryAfter: jitter(d.retry - waited),
		Shard: d.shard, DecidedAt: d.decidedAt + int64(now.Sub(d.sent)), Algorithm: d.limit.Algorithm,
	}
}

func untried(r *ring.Ring, it *item, now time.Time) Result {
	return Result{
		Decision: Deny, Reason: Refunded, Cached: true,
		Limit: it.op.Limit.Capacity(), Shard: r.ShardFor(it.op.Key),
		DecidedAt: now.UnixNano(), Algorithm: it.op.Limit.Algorithm,
	}
}

// learn takes in shard s's answer a to the items idx, sent at sent and
// answered at recv: it remembers the denials of a hard group, then drops
// the entries that the answer shows stale. A refunded item's bucket was
// given back what a remembered denial may have counted as taken (two items
// of one bucket in one request), and a bucket that allowed cost after a
// denial of no more than cost has room the denial did not foresee.
func (c *denyCache) learn(s int, a *Applied, idx []int, items []item, hard bool, sent, recv time.Time) {
	for j, i := range idx {
		if r := &a.Results[j]; hard && denied(r) && items[i].op.Kind == fsm.OpTake {
			c.store(s, a.Now, r, &items[i], sent, recv)
		}
	}
	for j, i := range idx {
		r, h := &a.Results[j], keyhash.Sum(items[i].op.Key)
		switch {
		case r.Refunded:
			c.drop(h)
		case r.Allowed && items[i].op.Kind == fsm.OpTake:
			if d, ok := c.entries.Peek(h); ok && d.decidedAt < a.Now && items[i].op.Cost >= d.cost {
				c.drop(h)
			}
		}
	}
}

// denied: a fresh denial by the bucket, with a wait (a replay is an older
// request's answer; an invalid op decided nothing).
func denied(r *fsm.Result) bool {
	return !r.Allowed && !r.Refunded && !r.Replayed && r.Err == nil && r.RetryAfter > 0
}

func (c *denyCache) store(s int, now int64, r *fsm.Result, it *item, sent, recv time.Time) {
	h := keyhash.Sum(it.op.Key)
	if old, ok := c.entries.Peek(h); ok && old.limit == it.op.Limit && old.version == it.version &&
		old.cost < it.op.Cost && recv.Sub(old.sent) < old.retry {
		return // a denial of a smaller cost still holds: it answers more checks
	}
	d := denial{
		limit: it.op.Limit, version: it.version, cost: it.op.Cost, shard: s,
		sent: sent, recv: recv, retry: r.RetryAfter, decidedAt: now,
		remaining: r.Remaining, resetAfter: r.ResetAfter, capacity: r.Limit,
	}
	if c.entries.Add(h, d) {
		c.count("evicted", 1)
	}
	c.count("stored", 1)
}

func (c *denyCache) drop(h uint64) {
	if c.entries.Remove(h) {
		c.count("dropped", 1)
	}
}

// forget drops the entries of the items idx, which were refunded.
func (c *denyCache) forget(idx []int, items []item) {
	for _, i := range idx {
		c.drop(keyhash.Sum(items[i].op.Key))
	}
}
