package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorate/quorate/fsm"
)

const tableShards = 64

// entry is this node's budget for one bucket.
type entry struct {
	key   string // the bucket key (name NUL key)
	hash  uint64 // Hash(key), kept so the hot path hashes once
	limit fsm.Limit
	// shard is the shard the key routes to; a split moves the key (and
	// its lease, under the same ID) to a new shard, which entryFor learns
	// from the caller's routing.
	shard atomic.Int32

	budget    atomic.Int64 // units this node may still spend
	deadline  atomic.Int64 // local Unix ns: budget is spendable before it
	denyUntil atomic.Int64 // local Unix ns: the bucket was empty, deny until then
	lowWater  atomic.Int64 // renew when budget falls below it
	spent     atomic.Int64 // units spent since the last renewal round
	renewing  atomic.Bool  // a grant request is in flight or queued
	// gen counts the renewals and returns that declared this entry's
	// budget to the shard. A spend refunded after one would put back units
	// the shard no longer counts as held, so refunds check it (refund).
	gen atomic.Uint64
	// creditSlot is the credit slot of the key's shard and name, once
	// looked up (credit.go).
	creditSlot atomic.Pointer[creditSlot]

	mu       sync.Mutex // guards the fields below and serializes grants
	lease    uint64     // the current lease, for Return and renewal
	leaseAmt int64      // what the current lease holds: the most a Return of it credits
	// kept is what the renewal in flight told the shard this node still
	// holds of its lease (op Held), and carrying whether it asked to carry
	// it over; fold settles the budget against them.
	kept     int64
	carrying bool
	rate     float64 // EWMA of units spent per second
	idle     int     // renewal rounds without spending
	grantLat time.Duration
	asked    int64 // the amount of the grant in flight
	// contended: the last grant gave less than asked, so the bucket is
	// scarce and holding a reserve would only idle budget others need.
	contended bool

	// next collects the checks that found no budget and wait to be decided
	// by the next grant: it asks for their cost on top of the lease, so its
	// commit decides them (one Raft entry, not a grant and a strict check).
	// inflight is the grant being built or sent, too late to join; checks
	// that find no budget meanwhile may wait for it.
	next, inflight *attempt
}

// attempt is a grant that checks wait on.
type attempt struct {
	carry int64         // units the waiting checks need, guarded by the entry's mu
	done  chan struct{} // closed once the grant is folded in (or failed)
}

type tableShard struct {
	mu sync.RWMutex
	m  map[uint64]*entry // guarded by mu
	// hits and misses count local decisions; per table shard, so counting
	// does not make every check touch one cache line.
	hits, misses atomic.Int64
}

// Table is a node's lease table: its budgets, one entry per bucket it
// spends from, and its credits. Use New; Close returns what it holds.
type Table struct {
	sub     Submitter
	cfg     Config
	credits *credits
	shards  [tableShards]tableShard
	wake    chan *entry
	stop    chan struct{}
	wg      sync.WaitGroup
}

// New returns a table that takes grants and credits from sub's shards. It
// starts cfg.Workers grant workers and the renewal rounds; Close stops them.
func New(sub Submitter, cfg Config) *Table {
	lt := newTable(sub, cfg)
	for range lt.cfg.Workers {
		lt.wg.Add(1)
		go lt.worker()
	}
	lt.wg.Add(1)
	go lt.rounds()
	return lt
}

// newTable is a table without its goroutines: tests run the workers'
// and the rounds' steps themselves.
func newTable(sub Submitter, cfg Config) *Table {
	cfg.setDefaults()
	lt := &Table{sub: sub, cfg: cfg, wake: make(chan *entry, cfg.QueueLen), stop: make(chan struct{})}
	lt.credits = newCredits(lt, cfg.CreditTTL, cfg.CreditTTL <= 0)
	for i := range lt.shards {
		lt.shards[i].m = map[uint64]*entry{}
	}
	return lt
}

// now reads the table's clock.
func (lt *Table) now() time.Time { return lt.cfg.Clock() }

func (lt *Table) shardOf(h uint64) *tableShard { return &lt.shards[h%tableShards] }

// lookup returns the entry for key, or nil.
func (lt *Table) lookup(key string, h uint64) *entry {
	s := lt.shardOf(h)
	s.mu.RLock()
	e := s.m[h]
	s.mu.RUnlock()
	if e == nil || e.key != key {
		return nil
	}
	return e
}

// Outcome is how a check was decided locally.
type Outcome int

const (
	Hit      Outcome = iota // allowed from local budget
	Deny                    // denied: the bucket was empty at the last grant
	Miss                    // no budget (or expired): a grant is needed, or the caller decides strictly
	Credited                // allowed from the shard's credit (credit.go)
)

// spend tries to take cost from e's budget at now (Unix ns). It returns the
// outcome and the budget left.
func (lt *Table) spend(e *entry, cost, now int64) (Outcome, int64, uint64) {
	// Read before the budget: a renewal that declares the budget after this
	// read bumps gen, and then a refund of this spend is dropped.
	gen := e.gen.Load()
	if now < e.deadline.Load() {
		for {
			b := e.budget.Load()
			if b < cost {
				break
			}
			if e.budget.CompareAndSwap(b, b-cost) {
				e.spent.Add(cost)
				if b-cost < e.lowWater.Load() {
					lt.signal(e)
				}
				return Hit, b - cost, gen
			}
		}
	}
	if now < e.denyUntil.Load() {
		return Deny, 0, gen
	}
	return Miss, 0, gen
}

// refund puts back units spent by a request that was denied as a whole,
// unless the budget was declared to the shard since the spend (gen): the
// shard then counts those units as spent, and they are lost to this node
// (under-admission, never over).
func (e *entry) refund(cost int64, gen uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen.Load() != gen {
		return
	}
	e.budget.Add(cost)
	e.spent.Add(-cost)
}

// signal queues e for a grant unless one is already queued or in flight.
// It never blocks: when the queue is full, the renewal round picks e up.
func (lt *Table) signal(e *entry) {
	if !e.renewing.CompareAndSwap(false, true) {
		return
	}
	select {
	case lt.wake <- e:
	default:
		e.renewing.Store(false)
		lt.cfg.Metrics.Shed("grant")
	}
}

// entryFor returns the entry for key (its hash h, on shard), creating it
// if needed.
func (lt *Table) entryFor(key string, h uint64, l fsm.Limit, shard int) *entry {
	if e := lt.lookup(key, h); e != nil {
		if e.limit != l { // the limit changed: grant under the new one from now on
			e.mu.Lock()
			e.limit = l
			e.mu.Unlock()
		}
		if int(e.shard.Load()) != shard {
			// A split moved the key: its lease moved with it, so renewals
			// and returns go to the new shard, and credits are the new
			// shard's.
			e.shard.Store(int32(shard))
			e.creditSlot.Store(nil)
		}
		return e
	}
	s := lt.shardOf(h)
	s.mu.Lock()
	e := s.m[h]
	if e == nil || e.key != key {
		e = &entry{key: key, hash: h, limit: l}
		e.shard.Store(int32(shard))
		e.lowWater.Store(1)
		s.m[h] = e
	}
	s.mu.Unlock()
	return e
}

// join adds cost to the grant e will ask for next and returns it, or nil
// when a grant is already in flight without this check.
func (lt *Table) join(e *entry, cost int64) *attempt {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight != nil {
		return nil
	}
	if e.next == nil {
		e.next = &attempt{done: make(chan struct{})}
	}
	e.next.carry += cost
	return e.next
}

// acquire waits for the grant that decides a check which found no budget.
// The check has joined the next grant (join, then signal), which asks for
// its cost on top of the lease and so decides it in the same commit: one
// Raft entry, where a strict fallback would add a second. When a grant was
// already in flight without it (att is nil), that grant is as near as any
// commit the check could make, so the check waits for it. Either wait is
// bounded by AcquireWait and ctx; if the grant is late or brings too
// little, the caller decides the check strictly.
func (lt *Table) acquire(ctx context.Context, e *entry, att *attempt) {
	if att == nil {
		e.mu.Lock()
		att = e.inflight
		e.mu.Unlock()
		if att == nil {
			return // it ended meanwhile
		}
	}
	t := time.NewTimer(lt.cfg.AcquireWait)
	defer t.Stop()
	select {
	case <-att.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// worker takes entries that need budget and asks their shards for grants,
// many per call: the entries queued behind the first are drained and their
// grants sent together, one Submit per shard, so acquiring thousands of
// buckets costs a handful of Raft entries.
func (lt *Table) worker() {
	defer lt.wg.Done()
	for {
		var batch []*entry
		select {
		case e := <-lt.wake:
			batch = append(batch, e)
		case <-lt.stop:
			return
		}
	drain:
		for len(batch) < 1024 {
			select {
			case e := <-lt.wake:
				batch = append(batch, e)
			default:
				break drain
			}
		}
		lt.grant(batch)
	}
}

// want is how much e asks for: its expected demand over the next renewal
// interval plus the reserve. Guarded by e.mu.
func (lt *Table) want(e *entry) int64 {
	c := e.limit.Capacity()
	if e.rate == 0 {
		return max(1, c/8)
	}
	return min(c, max(1, int64(e.rate*(lt.cfg.RenewInterval+lt.reserve(e)).Seconds())))
}

// reserve is the demand a node keeps in hand beyond the next renewal: three
// quarters of a lease lifetime, enough to serve through a shard leader's
// election (two to four seconds with the shard's 1s timeouts on a loaded
// machine) without asking anyone.
// A contended bucket gets no reserve: its budget is better spent by the
// nodes that need it now. Guarded by e.mu.
func (lt *Table) reserve(e *entry) time.Duration {
	if e.contended {
		return 0
	}
	return lt.cfg.TTL * 3 / 4
}

// grant asks the entries' shards for budget and folds the answers in.
func (lt *Table) grant(batch []*entry) {
	byShard := map[int][]*entry{}
	for _, e := range batch {
		sh := int(e.shard.Load()) // once: entryFor may move it meanwhile
		byShard[sh] = append(byShard[sh], e)
	}
	var wg sync.WaitGroup
	for s, es := range byShard {
		wg.Go(func() { lt.grantShard(s, es) })
	}
	wg.Wait()
}

func (lt *Table) grantShard(s int, es []*entry) {
	var ops []fsm.Op
	at := make([]int, len(es)) // index of each entry's Grant in ops
	atts := make([]*attempt, len(es))
	returned := 0
	for i, e := range es {
		e.mu.Lock()
		att := e.next
		if att == nil {
			att = &attempt{done: make(chan struct{})}
		}
		e.next, e.inflight, atts[i] = nil, att, att
		ask, excess := lt.renewal(e, lt.now().UnixNano())
		grant := fsm.Op{Kind: fsm.OpGrant, Key: e.key, Limit: e.limit, Holder: lt.cfg.Holder, TTL: lt.cfg.TTL}
		if e.carrying {
			grant.Lease, grant.Held = e.lease, e.kept
		}
		if excess > 0 {
			// In the same entry as the grant: the excess is credited back
			// to the bucket before the new lease is cut from it, and the
			// lease trimmed to what this node keeps.
			ops = append(ops, fsm.Op{Kind: fsm.OpReturn, Key: e.key, Holder: lt.cfg.Holder, Lease: e.lease, Cost: excess, Held: e.kept})
			returned++
		}
		e.asked = min(e.limit.Capacity(), ask+att.carry)
		grant.Cost = e.asked
		at[i] = len(ops)
		ops = append(ops, grant)
		e.mu.Unlock()
	}
	sent := lt.now()
	ctx, cancel := context.WithTimeout(context.Background(), lt.cfg.SubmitTimeout)
	defer cancel()
	a, err := lt.sub.Submit(ctx, s, ops)
	lat := lt.now().Sub(sent)
	lt.cfg.Metrics.GrantWait(lat)
	ok := err == nil && len(a.Results) == len(ops)
	if returned > 0 {
		// A failed return is not put back: it may have been applied.
		// Its units are lost to this node (under-admission, never over).
		result := "ok"
		if !ok {
			result = "error"
		}
		lt.cfg.Metrics.Returned(result, returned)
	}
	for i, e := range es {
		if !ok {
			lt.cfg.Metrics.Grant("error")
			lt.finish(e, atts[i]) // safe mode: keep spending what is held
			continue
		}
		lt.fold(e, a.Results[at[i]], a.Now, sent, lat)
		lt.finish(e, atts[i])
	}
}

// renewal sizes e's next grant. A node aims to hold, right after a grant,
// its demand over the next renewal interval plus the reserve (want) on top
// of its low-water mark: what it holds when a renewal is triggered by
// spending. It asks for the difference (at least 1: the grant also extends
// the deadline). When it holds more than that level, its demand has
// dropped, and it gives the excess back in the same entry (excess: taken
// out of the budget now, so it cannot be spent meanwhile), up to what the
// current lease holds, which is the most the state machine credits for it.
//
// A lease still spendable at now is renewed, not replaced: the grant
// carries what this node keeps of it (e.kept) into the new lease, so the
// units it spends after the old lease's expiry are the new lease's, which
// the shard holds back from the bucket until then (fsm's clearAt). Bumping
// gen under e.mu stops refunds of earlier spends from raising the budget
// above what was declared. Guarded by e.mu.
func (lt *Table) renewal(e *entry, now int64) (ask, excess int64) {
	level := lt.want(e) + e.lowWater.Load()
	e.gen.Add(1)
	e.carrying = e.lease != 0 && now < e.deadline.Load()
	if !e.carrying {
		e.kept = 0
		return max(1, level), 0
	}
	for {
		held := e.budget.Load()
		excess = 0
		if held > level && !e.contended {
			// A scarce bucket's budget is spent soon by this node anyway.
			excess = min(held-level, e.leaseAmt)
		}
		if e.budget.CompareAndSwap(held, held-excess) {
			e.kept = max(0, held-excess)
			return max(1, level-held), excess
		}
	}
}

// finish ends e's grant attempt and wakes its waiters. Checks that joined
// the next grant while this one was in flight get it asked for now.
func (lt *Table) finish(e *entry, att *attempt) {
	e.mu.Lock()
	e.inflight = nil
	e.mu.Unlock()
	e.renewing.Store(false)
	close(att.done)
	// Checked after renewing is cleared: a check that joined before then
	// could not queue the grant itself.
	e.mu.Lock()
	queued := e.next != nil
	e.mu.Unlock()
	if queued {
		lt.signal(e)
	}
}

// lowWater is the budget below which e renews: its reserve plus two grant
// round trips of demand. Guarded by e.mu.
func (lt *Table) lowWater(e *entry, lat time.Duration) int64 {
	return max(1, int64((lt.reserve(e)+2*lat).Seconds()*e.rate))
}

// fold applies one grant result to e.
func (lt *Table) fold(e *entry, r fsm.Result, machineNow int64, sent time.Time, lat time.Duration) {
	m := lt.cfg.Metrics
	e.mu.Lock()
	defer e.mu.Unlock()
	e.grantLat = lat
	if r.Err != nil {
		m.Grant("error")
		return
	}
	fresh := r.Granted // units new to this node
	if e.carrying && r.Allowed {
		fresh -= e.kept
	}
	e.contended = fresh < e.asked
	if !r.Allowed || r.Granted <= 0 {
		m.Grant("empty")
		// The bucket is empty: deny locally until it has refilled, but ask
		// again no sooner than a short pause, so an exhausted bucket does
		// not turn every check into a Raft commit.
		e.denyUntil.Store(lt.now().Add(max(r.RetryAfter, 20*time.Millisecond)).UnixNano())
		return
	}
	if e.deadline.Load() == 0 { // never held, or given back
		m.Grant("acquired")
	} else {
		m.Grant("renewed")
	}
	life := time.Duration(r.Expires - machineNow) // the state machine may cut it short (windows)
	deadline := sent.Add(life - life/10).UnixNano()
	if e.carrying {
		// The new lease holds what was kept (less, if the shard no longer
		// had the old lease): spends since then come off either way.
		e.budget.Add(fresh)
	} else {
		e.budget.Store(r.Granted) // the old lease expired: its units are void
	}
	e.deadline.Store(deadline)
	e.denyUntil.Store(0)
	e.lease, e.leaseAmt = r.Lease, r.Granted
	e.idle = 0
	e.lowWater.Store(lt.lowWater(e, lat))
}

// rounds re-estimates every entry's demand each renewal interval, renews
// entries about to run dry or expire, and returns idle ones.
func (lt *Table) rounds() {
	defer lt.wg.Done()
	t := time.NewTicker(lt.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-lt.stop:
			return
		case <-t.C:
		}
		lt.round(lt.now())
	}
}

// round is one renewal round at now.
func (lt *Table) round(now time.Time) {
	var idle []*entry
	lt.credits.renew(now)
	for i := range lt.shards {
		s := &lt.shards[i]
		s.mu.RLock()
		for _, e := range s.m {
			if lt.tick(e, now) {
				idle = append(idle, e)
			}
		}
		s.mu.RUnlock()
	}
	lt.giveBack(idle, true)
}

// tick updates e's demand estimate and reports whether e is idle.
func (lt *Table) tick(e *entry, now time.Time) bool {
	if !e.mu.TryLock() {
		return false // a grant is running; next round
	}
	defer e.mu.Unlock()
	spent := e.spent.Swap(0)
	e.rate = 0.5*e.rate + 0.5*float64(spent)/lt.cfg.RenewInterval.Seconds()
	if e.next != nil || e.inflight != nil {
		if e.next != nil {
			lt.signal(e) // checks wait for a grant the full queue dropped
		}
		return false
	}
	if spent == 0 {
		// Idle for a whole lease lifetime: give the budget back.
		e.idle++
		return time.Duration(e.idle)*lt.cfg.RenewInterval >= lt.cfg.TTL
	}
	e.idle = 0
	if e.lease == 0 && e.deadline.Load() == 0 {
		// Never leased (spent from a credit only): a lease is asked for
		// when the key is used again, not every round.
		return false
	}
	// The low-water mark follows the new rate at once, so a node whose
	// demand grew tops up its reserve now rather than after running dry.
	e.lowWater.Store(lt.lowWater(e, e.grantLat))
	if e.budget.Load() < e.lowWater.Load() || lt.expiring(e, now) {
		lt.signal(e)
	}
	return false
}

// expiring reports whether e's lease could lapse before a renewal sent at
// the next round lands: the next round is up to a renewal interval away,
// and a grant can take several times its last latency on a loaded machine.
// A lapse would send every check to a grant until the renewal lands, so the
// renewal goes out a round early. The lead never exceeds half of what a
// node may spend a lease for (0.9·TTL): with a short TTL, or grants slowed
// by a loaded shard, a longer lead would renew every busy lease every round,
// and the extra grants would slow the shard further. Guarded by e.mu.
func (lt *Table) expiring(e *entry, now time.Time) bool {
	lead := 2*lt.cfg.RenewInterval + 4*min(e.grantLat, lt.cfg.RenewInterval)
	lead = min(lead, lt.cfg.TTL*9/20)
	return now.Add(lead).UnixNano() >= e.deadline.Load()
}

// giveBack returns the unused budget of entries to their shards, batched
// per shard, and forgets the entries when drop is set.
func (lt *Table) giveBack(entries []*entry, drop bool) {
	byShard := map[int][]fsm.Op{}
	for _, e := range entries {
		if drop {
			h := e.hash
			s := lt.shardOf(h)
			s.mu.Lock()
			if s.m[h] == e {
				delete(s.m, h)
			}
			s.mu.Unlock()
		}
		e.mu.Lock()
		e.gen.Add(1)
		unused := e.budget.Swap(0)
		lease := e.lease
		e.lease, e.leaseAmt = 0, 0
		e.deadline.Store(0)
		e.mu.Unlock()
		if lease != 0 && unused > 0 {
			sh := int(e.shard.Load())
			// Key and holder: after a split another group may have granted
			// the same lease ID (fsm's giveBack).
			byShard[sh] = append(byShard[sh], fsm.Op{Kind: fsm.OpReturn, Key: e.key, Holder: lt.cfg.Holder, Lease: lease, Cost: unused})
		}
	}
	var wg sync.WaitGroup
	for s, ops := range byShard {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), lt.cfg.SubmitTimeout)
			defer cancel()
			for len(ops) > 0 {
				batch := ops[:min(len(ops), 512)]
				ops = ops[len(batch):]
				if _, err := lt.sub.Submit(ctx, s, batch); err != nil {
					lt.cfg.Metrics.Returned("error", len(batch))
					continue
				}
				lt.cfg.Metrics.Returned("ok", len(batch))
			}
		})
	}
	wg.Wait()
}

// Close stops the table and returns every unused budget (graceful
// shutdown): call it while the shards can still take the returns.
func (lt *Table) Close() {
	close(lt.stop)
	lt.wg.Wait()
	var all []*entry
	for i := range lt.shards {
		s := &lt.shards[i]
		s.mu.RLock()
		for _, e := range s.m {
			all = append(all, e)
		}
		s.mu.RUnlock()
	}
	lt.giveBack(all, true)
}

// Held sums the budget this node holds, all buckets.
func (lt *Table) Held() int64 {
	var sum int64
	for i := range lt.shards {
		s := &lt.shards[i]
		s.mu.RLock()
		for _, e := range s.m {
			sum += e.budget.Load()
		}
		s.mu.RUnlock()
	}
	return sum
}

// Buckets counts the buckets the table has an entry for (held or recently
// asked for).
func (lt *Table) Buckets() int {
	n := 0
	for i := range lt.shards {
		s := &lt.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// Decisions counts the checks Spend decided locally (hits: from a lease or
// a credit, or denied) and those it could not (misses: they needed a grant
// or the strict path), since the table was made.
func (lt *Table) Decisions() (hits, misses int64) {
	for i := range lt.shards {
		hits += lt.shards[i].hits.Load()
		misses += lt.shards[i].misses.Load()
	}
	return hits, misses
}
