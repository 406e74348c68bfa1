package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorate/quorate/fsm"
)

// Credits let a leased check on a key this node has never leased be decided
// locally. A shard grants a node a credit (fsm OpCredit) for one limit name:
// up to fsm.CreditAllowance(limit) units on every bucket of that name that
// did not exist at the grant, until the credit expires, with a filter of the
// buckets that did.
// The state machine charges those units against each bucket as it comes
// into being, so spending them can never over-admit (fsm/credit.go has the
// argument). A node asks for a shard's credit on its first leased miss
// there, renews it while leased checks keep arriving for the shard, and
// lets it lapse when they stop.
//
// A key that has taken all but creditCushion units of its allowance from a
// credit is in use: its entry asks for an ordinary lease in the background,
// which then serves it, and the cushion serves the key while the grant is in
// flight. Keys checked a few times per credit (most keys, under a uniform or
// long-tailed load) never cost a grant. A key whose allowance is too small
// for a cushion gets its lease when the allowance runs out.
const creditCushion = 2

// credit is one shard's credit held by this node, with what the node has
// admitted from it on each key. The record lives as long as the credit, not
// as the key's lease entry (which is dropped when idle), so a key's
// allowance is spent at most once per credit.
type credit struct {
	deadline int64 // local Unix ns: spendable before it
	// rng is the hash range the shard owned at the grant (zero: all): a
	// split may since have given part of it to another shard, which does
	// not know of credits granted after its fence, so a key outside it is
	// not the credit's to spend on, whatever this node's routing says.
	rng fsm.Range
	// shared is the shard's newest filter (see shardFilter); own is the
	// credit's own, used only where the two could not be combined.
	shared *atomic.Pointer[shardFilter]
	own    fsm.Filter
	uses   [creditShards]creditUses
}

// existed reports whether key hash h may have had a bucket at the credit's
// grant: such a key is not the credit's to spend on.
func (cr *credit) existed(h uint64) bool {
	if cr.shared != nil {
		return cr.shared.Load().f.MayContain(h)
	}
	return cr.own.MayContain(h)
}

// shardFilter is the filter of the newest credit grant of one shard: the
// buckets that existed at log index index. Every credit of the shard reads
// it rather than keeping its own copy (up to 128 KiB each, one per scope),
// so credit filters take one per shard. A filter from index j serves a
// credit granted at i <= j: a key it leaves out had no bucket at j; if it
// had one at i, that bucket has since expired, and a key that comes into
// being again is charged every credit still remembered, this one included
// (fsm/credit.go). Filters are installed before their credit, and only ever
// replaced by a newer one, so the filter a credit reads is never older
// than its grant. Two grants in one log entry are combined: which of their
// ops ran first is unknown.
type shardFilter struct {
	index uint64
	f     fsm.Filter
}

const creditShards = 16

type creditUses struct {
	mu sync.Mutex
	m  map[uint64]creditUse // by bucket key hash; guarded by mu
}

// creditUse is what a credit admitted on one key, and the most it may: the
// allowance at the key's first use under the credit, lowered if the key's
// limit drops, never raised (the shard charged the allowance of the limit
// it saw).
type creditUse struct{ spent, allow int64 }

// take admits cost on key hash h if the key's allowance has room.
func (cr *credit) take(h uint64, cost, allow int64) (left int64, ok bool) {
	s := &cr.uses[h%creditShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint64]creditUse{}
	}
	u, seen := s.m[h]
	if !seen || allow < u.allow {
		u.allow = allow
	}
	if u.spent+cost > u.allow {
		s.m[h] = u
		return 0, false
	}
	u.spent += cost
	s.m[h] = u
	return u.allow - u.spent, true
}

// refund gives back units of key h that a request denied as a whole spent.
func (cr *credit) refund(h uint64, cost int64) {
	s := &cr.uses[h%creditShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.m[h]
	u.spent = max(0, u.spent-cost)
	s.m[h] = u
}

type creditSlot struct {
	key     creditKey
	cur     atomic.Pointer[credit]
	asking  atomic.Bool  // a request is in flight
	used    atomic.Int64 // local Unix ns of the last miss on this shard
	refused atomic.Int64 // local Unix ns before which not to ask again
	dropped atomic.Bool  // reclaimed: entries that kept it look it up again
}

// credits holds this node's credits, one slot per shard and scope (a
// limit's name: a shard's credit covers the buckets of one limit, so limits
// that are never leased are never charged; see fsm.CreditScope).
type credits struct {
	lt  *Table
	ttl time.Duration
	off bool // no CreditTTL: credits are disabled

	mu      sync.RWMutex
	slots   map[creditKey]*creditSlot
	filters map[filterKey]*atomic.Pointer[shardFilter] // one per shard: its range's newest
}

// filterKey names the filters that may serve each other's credits: those
// of one shard while it owned one range. A filter of a later grant does not
// serve a credit granted before a split's fence: a bucket that left the
// shard with the split did not expire, so the reasoning of shardFilter
// does not hold across it.
type filterKey struct {
	shard int
	rng   fsm.Range
}

type creditKey struct {
	shard int
	scope string
}

func newCredits(lt *Table, ttl time.Duration, off bool) *credits {
	return &credits{lt: lt, ttl: ttl, off: off, slots: map[creditKey]*creditSlot{}, filters: map[filterKey]*atomic.Pointer[shardFilter]{}}
}

// slot returns k's slot, or nil when the table holds its bound of slots.
func (c *credits) slot(k creditKey) *creditSlot {
	c.mu.RLock()
	sl := c.slots[k]
	c.mu.RUnlock()
	if sl != nil {
		return sl
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sl = c.slots[k]; sl == nil {
		if bound := c.lt.cfg.MaxCreditSlots; bound > 0 && len(c.slots) >= bound {
			c.lt.cfg.Metrics.Shed("credit_slot")
			return nil
		}
		sl = &creditSlot{key: k}
		c.slots[k] = sl
	}
	return sl
}

// creditSpend is a check decided from a credit.
type creditSpend struct {
	cr   *credit // for a refund
	left int64   // what the credit still allows on the key
}

// spend tries to admit cost on e from its shard's credit at now (local Unix
// ns). It asks for a credit when the shard has none.
func (c *credits) spend(e *entry, cost, now int64) (creditSpend, bool) {
	if c.off {
		return creditSpend{}, false
	}
	// The entry keeps its slot: a key's shard and name never change, and
	// the slot map's lock is then taken once per key, not per check.
	sl := e.creditSlot.Load()
	if sl == nil || sl.dropped.Load() {
		if sl = c.slot(creditKey{int(e.shard.Load()), fsm.CreditScope(e.key)}); sl == nil {
			return creditSpend{}, false
		}
		e.creditSlot.Store(sl)
	}
	if now-sl.used.Load() > int64(time.Second/10) { // renew reads it at second granularity
		sl.used.Store(now)
	}
	cr := sl.cur.Load()
	if cr == nil || now >= cr.deadline {
		c.ask(sl, now)
		return creditSpend{}, false
	}
	e.mu.Lock()
	allow := fsm.CreditAllowance(e.limit)
	e.mu.Unlock()
	if allow == 0 || !cr.rng.Contains(e.hash) || cr.existed(e.hash) {
		return creditSpend{}, false // not creditable, not the shard's at the grant, or existed then
	}
	left, ok := cr.take(e.hash, cost, allow)
	if !ok {
		return creditSpend{}, false
	}
	e.spent.Add(cost)
	if allow >= 2*creditCushion && left <= creditCushion && left+cost > creditCushion {
		c.lt.signal(e) // it just reached the cushion: in use, lease it
	}
	return creditSpend{cr: cr, left: left}, true
}

// refundCredit puts back units spent from a credit by a request denied as
// a whole.
func (e *entry) refundCredit(cs creditSpend, cost int64) {
	cs.cr.refund(e.hash, cost)
	e.spent.Add(-cost)
}

// ask requests sl's credit in the background unless a request is in
// flight or the shard refused one recently.
func (c *credits) ask(sl *creditSlot, now int64) {
	if now < sl.refused.Load() || !sl.asking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer sl.asking.Store(false)
		c.request(sl)
	}()
}

func (c *credits) request(sl *creditSlot) {
	k := sl.key
	m := c.lt.cfg.Metrics
	sent := c.lt.now()
	ctx, cancel := context.WithTimeout(context.Background(), c.lt.cfg.SubmitTimeout)
	defer cancel()
	ops := []fsm.Op{{Kind: fsm.OpCredit, Key: k.scope, Holder: c.lt.cfg.Holder, TTL: c.ttl}}
	a, err := c.lt.sub.Submit(ctx, k.shard, ops)
	if err != nil || len(a.Results) != 1 || a.Results[0].Err != nil {
		m.Credit("error")
		sl.refused.Store(c.lt.now().Add(time.Second).UnixNano())
		return
	}
	r := a.Results[0]
	if !r.Allowed {
		// The shard holds its quota of credits, or too many buckets.
		m.Credit("refused")
		sl.refused.Store(c.lt.now().Add(max(r.RetryAfter, time.Second)).UnixNano())
		return
	}
	life := time.Duration(r.Expires - a.Now)
	cr := &credit{deadline: sent.Add(life - life/10).UnixNano(), rng: r.Range}
	if cr.shared = c.install(filterKey{k.shard, r.Range}, a.Index, r.Filter); cr.shared == nil {
		cr.own = r.Filter
	}
	sl.cur.Store(cr)
	m.Credit("granted") // after the store: a count means the credit is usable
}

// install makes f, granted at log index index, the shard's filter unless a
// newer one is installed, and returns the shard's cell; nil when f and an
// installed filter of the same index cannot be combined (filters of nodes
// of another version), and the credit keeps its own.
func (c *credits) install(k filterKey, index uint64, f fsm.Filter) *atomic.Pointer[shardFilter] {
	c.mu.Lock()
	defer c.mu.Unlock()
	cell := c.filters[k]
	if cell == nil {
		// The shard owns a new range (a split): the filters of its old
		// ones serve only the credits that hold them already.
		for old := range c.filters {
			if old.shard == k.shard {
				delete(c.filters, old)
			}
		}
		cell = &atomic.Pointer[shardFilter]{}
		c.filters[k] = cell
	}
	cur := cell.Load()
	switch {
	case cur == nil || index > cur.index:
		cell.Store(&shardFilter{index: index, f: f})
	case index == cur.index:
		u, ok := fsm.Union(cur.f, f)
		if !ok {
			return nil
		}
		cell.Store(&shardFilter{index: index, f: u})
	}
	return cell
}

// renew runs each renewal round: a credit in use is renewed shortly before
// it lapses, an idle one is left to lapse. The lead is short (three rounds)
// because every live credit holds its allowance against each bucket that
// comes into being: two credits of one node overlapping would hold twice.
// A renewal that lands late only sends first checks to grants meanwhile.
func (c *credits) renew(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, sl := range c.slots {
		cr := sl.cur.Load()
		idle := now.UnixNano()-sl.used.Load() > int64(c.ttl)
		if idle && (cr == nil || now.UnixNano() >= cr.deadline) && !sl.asking.Load() {
			// Unused for a credit lifetime and holding nothing live:
			// reclaimed, so slots follow the names in use, not all names
			// ever checked (issue 13, finding 4).
			sl.dropped.Store(true)
			delete(c.slots, k)
			continue
		}
		if cr == nil || idle {
			continue
		}
		if now.Add(3*c.lt.cfg.RenewInterval).UnixNano() >= cr.deadline {
			c.ask(sl, now.UnixNano())
		}
	}
}

// slotCount is how many credit slots the table keeps.
func (c *credits) slotCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.slots)
}
