package decide

import (
	"context"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/ring"
)

// checkLeased decides a LEASED request from the lease table. An item whose
// budget is missing (first use, or spent) waits for a grant that carries
// its cost (see lease.Table.Spend); items the grants did not cover are
// decided strictly. Remaining and reset in a leased answer describe this
// node's view: remaining is the budget this node still holds for the
// bucket (other nodes hold their own), and reset_after is when that
// budget's lease ends.
func (e *Engine) checkLeased(ctx context.Context, r *ring.Ring, items []item) ([]Result, Decision) {
	results := make([]Result, len(items))
	local := make([]bool, len(items)) // items spent from, for refunds
	strict := map[int][]int{}
	var strictShards []int
	li := make([]lease.Item, len(items))
	for i, it := range items {
		h := keyhash.Sum(it.op.Key)
		li[i] = lease.Item{Key: it.op.Key, Hash: h, Limit: it.op.Limit, Cost: it.op.Cost, Shard: r.ShardForHash(h)}
	}
	sp := e.leases.Spend(ctx, li)
	now := e.clock().UnixNano()
	for i, x := range sp {
		l, s := li[i].Limit, li[i].Shard
		switch x.Outcome {
		case lease.Hit, lease.Credited:
			local[i] = true
			results[i] = leasedResult(l, s, Allow, WithinLimit, x.Left, 0, x.Deadline(), now)
		case lease.Deny:
			retry := time.Duration(x.DenyUntil() - now)
			results[i] = leasedResult(l, s, Deny, OverLimit, 0, max(0, jitter(retry)), x.Deadline(), now)
		default:
			e.obs.LeaseFallback()
			if _, ok := strict[s]; !ok {
				strictShards = append(strictShards, s)
			}
			strict[s] = append(strict[s], i)
		}
	}
	for _, s := range strictShards {
		// Decided one item at a time: strictly decided items of a leased
		// request are all-or-nothing through the refunds below.
		e.decideShard(ctx, s, strict[s], items, results)
	}
	decision := requestDecision(items, results)
	if decision == Deny && len(items) > 1 {
		for i, spent := range local {
			if spent {
				sp[i].Refund(items[i].op.Cost)
				results[i].Decision, results[i].Reason = Deny, Refunded
			}
		}
		if len(strictShards) > 0 {
			e.refundAcrossShards(strictShards, strict, items, results)
		}
	}
	return results, decision
}

// leasedResult answers from this node's view: left is what its lease (or
// credit) still allows, and the reset is when that lease ends.
func leasedResult(l fsm.Limit, s int, d Decision, r Reason, left int64, retry time.Duration, deadline, now int64) Result {
	return Result{
		Decision: d, Reason: r, Limit: l.Capacity(), Remaining: left,
		ResetAfter: time.Duration(max(0, deadline-now)),
		RetryAfter: retry,
		Shard:      s,
		DecidedAt:  now,
		Algorithm:  l.Algorithm,
	}
}
