package decide

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/ring"
)

// splitByShard groups item indexes by the shard that owns their key, and
// lists the shards in order.
func splitByShard(r *ring.Ring, items []item) (map[int][]int, []int) {
	byShard := map[int][]int{}
	for i := range items {
		s := r.ShardFor(items[i].op.Key)
		byShard[s] = append(byShard[s], i)
	}
	shards := make([]int, 0, len(byShard))
	for s := range byShard {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	return byShard, shards
}

// decideShard decides the items idx, which all live on shard s: the hard
// ones all-or-nothing, the soft ones each on its own, in parallel.
func (e *Engine) decideShard(ctx context.Context, s int, idx []int, items []item, results []Result) {
	hard, soft := splitSoft(idx, items)
	if len(soft) == 0 {
		e.decideGroup(ctx, s, hard, items, results, true)
		return
	}
	var wg sync.WaitGroup
	if len(hard) > 0 {
		wg.Go(func() { e.decideGroup(ctx, s, hard, items, results, true) })
	}
	e.decideGroup(ctx, s, soft, items, results, false)
	wg.Wait()
}

func splitSoft(idx []int, items []item) (hard, soft []int) {
	for _, i := range idx {
		if items[i].soft {
			soft = append(soft, i)
		} else {
			hard = append(hard, i)
		}
	}
	return hard, soft
}

func (e *Engine) decideGroup(ctx context.Context, s int, idx []int, items []item, results []Result, atomic bool) {
	var sent time.Time
	if e.denials != nil {
		sent = e.clock()
	}
	a, err := e.submit(ctx, s, opsOf(idx, items), atomic)
	// An atomic group with a moved op was rolled back whole in its entry
	// (fsm's settleGroups), so all of it is decided again.
	groupMoved := err == nil && atomic && slices.ContainsFunc(a.Results, movedResult)
	var moved []int
	for j, i := range idx {
		switch {
		case err != nil:
			results[i] = e.failMode(&items[i], s)
		case groupMoved || movedResult(a.Results[j]):
			moved = append(moved, i)
		default:
			results[i] = itemResult(a.Results[j], s, a.Index, a.Now)
			results[i].Algorithm = items[i].op.Limit.Algorithm
			items[i].replayed = a.Results[j].Replayed
		}
	}
	if e.denials != nil && err == nil && !groupMoved {
		e.denials.learn(s, &a, idx, items, atomic, sent, e.clock())
	}
	if len(moved) > 0 {
		e.reroute(ctx, s, moved, items, results, atomic)
	}
}

func opsOf(idx []int, items []item) []fsm.Op {
	ops := make([]fsm.Op, len(idx))
	for j, i := range idx {
		ops[j] = items[i].op
	}
	return ops
}

func movedResult(r fsm.Result) bool { return errors.Is(r.Err, fsm.ErrMoved) }

// reroute decides again items that shard s refused because their range
// moved to a split's child: nothing of them was applied. Once the routing
// sends them elsewhere they go to their new shards; if it does not before
// ctx ends, their fail modes answer.
func (e *Engine) reroute(ctx context.Context, s int, idx []int, items []item, results []Result, atomic bool) {
	r := e.awaitRoute(ctx, s, opsOf(idx, items))
	if r == nil {
		e.obs.Rerouted("expired", len(idx))
		for _, i := range idx {
			results[i] = e.failMode(&items[i], s)
		}
		return
	}
	e.obs.Rerouted("sent", len(idx))
	by := map[int][]int{}
	for _, i := range idx {
		s2 := r.ShardFor(items[i].op.Key)
		by[s2] = append(by[s2], i)
	}
	for s2, sub := range by {
		e.decideGroup(ctx, s2, sub, items, results, atomic)
	}
}

// awaitRoute waits until the routing sends one of ops' keys off shard s (a
// split's child took its range) and returns it, or nil if ctx ends first.
func (e *Engine) awaitRoute(ctx context.Context, s int, ops []fsm.Op) *ring.Ring {
	for {
		cur, changed := e.shards.Routes()
		for i := range ops {
			if cur != nil && cur.ShardFor(ops[i].Key) != s {
				return cur
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// refundAcrossShards gives back what a denied multi-shard request took on
// the shards that allowed it. Within a shard, items are refunded in the same
// log entry that decided them; across shards a compensating Refund follows.
// Until it commits the consumption is visible to other checks, and if it
// cannot commit (the shard became unavailable) the consumption stands:
// under-admission, never over.
func (e *Engine) refundAcrossShards(shards []int, byShard map[int][]int, items []item, results []Result) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CheckTimeout)
	defer cancel()
	// Refunds go where each item was decided: a split may have moved it
	// from the shard it was first sent to (reroute).
	decidedAt := map[int][]int{}
	var at []int
	for _, s := range shards {
		for _, i := range byShard[s] {
			d := results[i].Shard
			if _, ok := decidedAt[d]; !ok {
				at = append(at, d)
			}
			decidedAt[d] = append(decidedAt[d], i)
		}
	}
	var wg sync.WaitGroup
	for _, s := range at {
		ops, idx := refundsOf(decidedAt[s], items, results)
		if len(ops) == 0 {
			continue
		}
		wg.Go(func() {
			if e.denials != nil {
				// Failed or not, the refund may have given the buckets room.
				defer e.denials.forget(idx, items)
			}
			if err := e.refund(ctx, s, ops); err != nil {
				e.obs.Refunds("failed", len(ops))
				return
			}
			e.obs.Refunds("ok", len(ops))
			for _, i := range idx {
				results[i].Decision, results[i].Reason = Deny, Refunded
			}
		})
	}
	wg.Wait()
}

// refundsOf makes the refunds of the items idx that a shard allowed.
func refundsOf(idx []int, items []item, results []Result) (ops []fsm.Op, refunded []int) {
	for _, i := range idx {
		// A replayed take is the first request's, already admitted:
		// refunding it would give that request's unit back (and forget its
		// record), so a retry could be admitted again and again.
		if results[i].Reason == WithinLimit && items[i].op.Kind == fsm.OpTake && !items[i].replayed {
			op := items[i].op
			op.Kind = fsm.OpRefund
			op.At = results[i].DecidedAt // windows refund only the window that counted it
			ops, refunded = append(ops, op), append(refunded, i)
		}
	}
	return ops, refunded
}

// refund applies refunds on shard s; those a split moved away since the
// take (fsm.ErrMoved: nothing applied) follow their keys to the new shard.
func (e *Engine) refund(ctx context.Context, s int, ops []fsm.Op) error {
	a, err := e.submit(ctx, s, ops, false)
	if err != nil {
		return err
	}
	var moved []fsm.Op
	for j, r := range a.Results {
		if movedResult(r) {
			moved = append(moved, ops[j])
		}
	}
	if len(moved) == 0 {
		return nil
	}
	r := e.awaitRoute(ctx, s, moved)
	if r == nil {
		return errNoDecision
	}
	by := map[int][]fsm.Op{}
	for _, op := range moved {
		s2 := r.ShardFor(op.Key)
		by[s2] = append(by[s2], op)
	}
	for s2, sub := range by {
		if err := e.refund(ctx, s2, sub); err != nil {
			return err
		}
	}
	return nil
}

// submit applies ops on shard s through Shards, behind the shard's
// breaker. Only the shard's own failures feed the breaker (outcomeOf).
func (e *Engine) submit(ctx context.Context, s int, ops []fsm.Op, atomic bool) (Applied, error) {
	if ctx.Err() != nil {
		// No time left (a deadline shorter than the reserve): trying would
		// only take the breaker's probe from a check that has time.
		return Applied{}, errNoDecision
	}
	if !e.breaker.allow(s) {
		return Applied{}, errNoDecision
	}
	a, err := e.shards.Submit(ctx, s, ops, atomic)
	e.breaker.done(s, outcomeOf(ctx, err))
	if err == nil && len(a.Results) != len(ops) {
		return Applied{}, errNoDecision // a Shards bug; never decide from it
	}
	return a, err
}

func itemResult(r fsm.Result, s int, index uint64, now int64) Result {
	res := Result{
		Decision: Allow, Reason: WithinLimit,
		Limit: r.Limit, Remaining: r.Remaining,
		ResetAfter: r.ResetAfter, RetryAfter: jitter(r.RetryAfter), Delay: r.Delay,
		Shard: s, Index: index, DecidedAt: now,
	}
	switch {
	case r.Refunded:
		res.Decision, res.Reason = Deny, Refunded
	case !r.Allowed || r.Err != nil:
		res.Decision, res.Reason = Deny, OverLimit
	}
	return res
}

// jitter lengthens a retry-after by up to 10%, at most maxJitter, so that
// the clients a limit denied together do not all come back at one instant.
// Never shorter: retrying earlier than the exact wait would be denied again.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + rand.N(min(d/10, maxJitter)+1)
}

const maxJitter = time.Second

// failMode answers an item whose shard could not decide in time: open
// allows with FailOpen, closed denies with Unavailable, and a fail-open
// item with an emergency cap is denied once this node's cap is spent.
// Neither looks like a normal decision.
func (e *Engine) failMode(it *item, s int) Result {
	res := Result{Limit: it.op.Limit.Capacity(), Shard: s}
	switch {
	case it.closed():
		res.Decision, res.Reason, res.RetryAfter = Deny, Unavailable, e.cfg.BreakerCooldown
		e.obs.FailMode("closed")
	case it.emergencyCap != nil && !e.caps.allow(it.op.Key, *it.emergencyCap, it.op.Cost, e.clock(), it.op.Kind == fsm.OpPeek):
		res.Decision, res.Reason, res.RetryAfter = Deny, Unavailable, e.cfg.BreakerCooldown
		e.obs.FailMode("capped")
	default:
		res.Decision, res.Reason = Allow, FailOpen
		e.obs.FailMode("open")
	}
	return res
}
