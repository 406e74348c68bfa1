package decide

import (
	"context"
	"sync"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
)

// Shards is how the engine reaches the shards: in a node, its own Raft
// groups and its peers; in a gateway, the cluster over gRPC.
type Shards interface {
	// Routes returns the current routing, nil until there is one, and a
	// channel closed when the routing next changes (a split's child took
	// its range).
	Routes() (*ring.Ring, <-chan struct{})
	// Submit applies ops on shard s at its leader, wherever that is,
	// retrying while the leader is unknown, moving or unreachable, until
	// ctx ends. With atomic, a Take's denial refunds the others in the
	// same entry (fsm.Op.Group). An error means the items' fail modes
	// answer: the ops may or may not have been applied. A batch the shard
	// refused as malformed wraps ErrRejected.
	Submit(ctx context.Context, s int, ops []fsm.Op, atomic bool) (Applied, error)
}

// Policies is the policy set the engine decides descriptor checks with.
type Policies interface {
	// Policies returns the set (never nil) and whether it has caught up
	// with the cluster's since the process started.
	Policies() (*policy.Snapshot, bool)
}

// Config wires an Engine. Zero values take the defaults.
type Config struct {
	Shards   Shards   // required
	Policies Policies // nil: descriptor checks are refused as behind
	// Lease configures the lease table that decides LEASED checks; nil:
	// leased checks are decided strictly. Its Clock is Config.Clock.
	Lease *lease.Config
	// Limits bound a request.
	Limits Limits
	// CheckTimeout bounds a check (default 1s); a caller's deadline
	// bounds it too, less a reserve for the answer's way back.
	CheckTimeout time.Duration
	// BreakerFailures shard failures in a row open the shard's breaker
	// (default 3) for BreakerCooldown (default 500ms).
	BreakerFailures int
	BreakerCooldown time.Duration
	// Clock is the one clock the engine reads: decision times, blocks'
	// expiry, emergency caps, the breaker and the lease table (default
	// time.Now). Deadlines are the context's.
	Clock func() time.Time
	// Observer receives what the engine counts (default: nothing kept).
	Observer Observer
	// Recorder receives every decided request (default: none kept).
	Recorder Recorder
	// RiskMemory bounds the subjects whose risk scores are remembered for
	// policies with risk.memory (default DefaultRiskMemory).
	RiskMemory int
	// DenyCache is how many recent strict denials the engine remembers, to
	// answer checks of those buckets until their retry-after without asking
	// the shard (denycache.go); 0 remembers none. An Observer that is a
	// DenyCacheObserver counts its hits, misses and evictions.
	DenyCache int
}

// Defaults of Config.
const (
	DefaultCheckTimeout    = time.Second
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = 500 * time.Millisecond
)

func (c *Config) setDefaults() {
	c.Limits.setDefaults()
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = DefaultCheckTimeout
	}
	if c.BreakerFailures <= 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.BreakerCooldown <= 0 {
		c.BreakerCooldown = DefaultBreakerCooldown
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.RiskMemory <= 0 {
		c.RiskMemory = DefaultRiskMemory
	}
	if c.Recorder == nil {
		c.Recorder = nopRecorder{}
	}
}

// Engine decides checks. It is safe for concurrent use; New starts the
// lease table's goroutines, Close stops them.
type Engine struct {
	cfg     Config
	shards  Shards
	clock   func() time.Time
	obs     Observer
	rec     Recorder
	breaker *breaker
	caps    *emergencyCaps
	risk    *riskMemory
	leases  *lease.Table // nil without Config.Lease
	denials *denyCache   // nil without Config.DenyCache
	closed  sync.Once
}

// New returns an engine for cfg.
func New(cfg Config) *Engine {
	cfg.setDefaults()
	e := &Engine{cfg: cfg, shards: cfg.Shards, clock: cfg.Clock, obs: cfg.Observer, rec: cfg.Recorder}
	e.breaker = newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown, cfg.Clock)
	e.caps = newEmergencyCaps(e.obs.CapsReset)
	e.risk = newRiskMemory(cfg.RiskMemory, e.obs)
	e.denials = newDenyCache(cfg.DenyCache, e.obs)
	if cfg.Lease != nil {
		lc := *cfg.Lease
		lc.Clock = cfg.Clock
		e.leases = lease.New(leaseSubmitter{e}, lc)
	}
	return e
}

// Leases returns the lease table, nil if the engine has none.
func (e *Engine) Leases() *lease.Table { return e.leases }

// Close returns the budget the lease table holds, while the shards still
// take it, and stops the table's goroutines. Calls after the first do
// nothing.
func (e *Engine) Close() {
	e.closed.Do(func() {
		if e.leases != nil {
			e.leases.Close()
		}
	})
}

// OpenBreakers counts the shards whose circuit breaker is open: checks on
// them are answered by their fail modes without trying the shard.
func (e *Engine) OpenBreakers() int { return e.breaker.open() }

// LeaderChanged closes shard s's breaker: it has a new leader, so the
// failures counted against the old one say nothing about it, and checks
// stop answering from their fail mode the moment the shard can decide.
func (e *Engine) LeaderChanged(s int) { e.breaker.reset(s) }

// Check decides a request: validate it whole, resolve descriptors against
// the policy set, decide each shard's items atomically at its leader
// (shards in parallel) or from the lease table, and, when the request is
// denied, refund what the other buckets allowed.
func (e *Engine) Check(ctx context.Context, req *Request) (*Answer, error) {
	start := e.clock()
	if err := validateRequest(req); err != nil {
		return nil, err
	}
	if req.Descriptors != nil {
		return e.checkDescriptors(ctx, req, start)
	}
	items, err := parseItems(req, &e.cfg.Limits)
	if err != nil {
		return nil, err
	}
	ans := &Answer{DryRun: req.DryRun}
	return e.run(ctx, start, req, items, nil, ans)
}

// run is the pipeline's tail, shared by both kinds of check: decide the
// items, explain them, count them.
func (e *Engine) run(ctx context.Context, start time.Time, req *Request, items []item, evs []evaluated, ans *Answer) (*Answer, error) {
	if req.DryRun {
		peekAll(items)
	}
	mode := modeLabel(items, e.leases != nil)
	results, decision, err := e.decide(ctx, items, mode != "strict")
	if err != nil {
		return nil, err
	}
	decision = throttle(items, results, decision)
	ans.Decision, ans.Results = decision, results
	if req.Descriptors != nil {
		e.explain(ans, evs)
	} else {
		ans.Reason = requestReason(results, decision)
	}
	for i := range results {
		im := "strict"
		if items[i].leased && e.leases != nil {
			im = "leased"
		}
		e.obs.Item(im, results[i].Decision.String(), results[i].Reason.String())
	}
	took := e.clock().Sub(start)
	e.obs.Request(mode, decision.String(), took)
	e.record(ctx, req, ans, mode, start, took)
	return ans, nil
}

// peekAll turns a request into a dry run: every Take becomes a Peek, which
// reports the same decision and consumes nothing, at the shard (a lease
// cannot peek).
func peekAll(items []item) {
	for i := range items {
		items[i].op.Kind = fsm.OpPeek
		items[i].op.IdempotencyKey = ""
		items[i].leased = false
	}
}

// modeLabel names how a request's items are decided: all at their shards
// ("strict"), all from leases ("leased"), or some of each ("mixed").
func modeLabel(items []item, haveLeases bool) string {
	n := 0
	for i := range items {
		if items[i].leased {
			n++
		}
	}
	switch {
	case n == 0 || !haveLeases:
		return "strict"
	case n == len(items):
		return "leased"
	}
	return "mixed"
}

// decide decides validated items, leased from the lease table or strict at
// their shards' leaders. Soft items (soft and shadow policies) are decided
// outside the request's all-or-nothing group: their denial does not deny
// the request, and a denied request gives back what they took too.
func (e *Engine) decide(ctx context.Context, items []item, leased bool) ([]Result, Decision, error) {
	r, _ := e.shards.Routes()
	if r == nil {
		return nil, 0, ErrNoCluster
	}
	ctx, cancel := e.checkContext(ctx)
	defer cancel()
	if leased && e.leases != nil {
		results, decision := e.checkLeased(ctx, r, items)
		return results, decision, nil
	}
	if e.denials != nil {
		if results, ok := e.denials.answer(r, items, e.clock()); ok {
			return results, Deny, nil
		}
	}
	if ctx.Err() != nil {
		// Trying would cost the shard work, and a fail mode's answer would
		// count as the shard's unavailability.
		return nil, 0, ErrNoTime
	}
	byShard, shards := splitByShard(r, items)
	results := make([]Result, len(items))
	e.decideShards(ctx, shards, byShard, items, results)
	decision := requestDecision(items, results)
	if decision == Deny {
		e.refundAcrossShards(shards, byShard, items, results)
	}
	return results, decision, nil
}

// decideShards decides each shard's items at its leader, shards in
// parallel.
func (e *Engine) decideShards(ctx context.Context, shards []int, byShard map[int][]int, items []item, results []Result) {
	if len(shards) == 1 {
		e.decideShard(ctx, shards[0], byShard[shards[0]], items, results)
		return
	}
	var wg sync.WaitGroup
	for _, s := range shards {
		wg.Go(func() { e.decideShard(ctx, s, byShard[s], items, results) })
	}
	wg.Wait()
}

// requestDecision denies if any hard item denied.
func requestDecision(items []item, results []Result) Decision {
	for i := range results {
		if results[i].Decision != Allow && !items[i].soft {
			return Deny
		}
	}
	return Allow
}

// requestReason is the reason of the result that decided: the first denial
// that is not a refund, else the first result's.
func requestReason(results []Result, d Decision) Reason {
	if d == Deny {
		for _, res := range results {
			if res.Decision == Deny && res.Reason != Refunded {
				return res.Reason
			}
		}
	}
	if len(results) > 0 {
		return results[0].Reason
	}
	return ReasonUnspecified
}

// leaseSubmitter is the lease table's way to the shards: the engine's
// submit, behind the breaker, never atomic (grants, returns and credits
// are independent ops).
type leaseSubmitter struct{ e *Engine }

func (s leaseSubmitter) Submit(ctx context.Context, shard int, ops []fsm.Op) (lease.Applied, error) {
	return s.e.submit(ctx, shard, ops, false)
}
