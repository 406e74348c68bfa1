package decide

import (
	"context"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/ring"
)

// checkLeased decides a request with leased items: those from the lease
// table, the others at their shards, all-or-nothing across both. A leased
// item whose budget is missing (first use, or spent) waits for a grant
// that carries its cost (see lease.Table.Spend); items the grants did not
// cover are decided strictly too. Remaining and reset in a leased answer describe this
// node's view: remaining is the budget this node still holds for the
// bucket (other nodes hold their own), and reset_after is when that
// budget's lease ends.
func (e *Engine) checkLeased(ctx context.Context, r *ring.Ring, items []item) ([]Result, Decision) {
	results := make([]Result, len(items))
	local := make([]bool, len(items)) // items spent from, for refunds
	strict := map[int][]int{}
	var strictShards []int
	li := make([]lease.Item, 0, len(items))
	at := make([]int, 0, len(items)) // li[k] is items[at[k]]
	toStrict := func(i, s int) {
		if _, ok := strict[s]; !ok {
			strictShards = append(strictShards, s)
		}
		strict[s] = append(strict[s], i)
	}
	for i, it := range items {
		h := keyhash.Sum(it.op.Key)
		if !it.leased {
			toStrict(i, r.ShardForHash(h))
			continue
		}
		li = append(li, lease.Item{Key: it.op.Key, Hash: h, Limit: it.op.Limit, Cost: it.op.Cost, Shard: r.ShardForHash(h)})
		at = append(at, i)
	}
	sp := e.leases.Spend(ctx, li)
	now := e.clock().UnixNano()
	for k, x := range sp {
		i, l, s := at[k], li[k].Limit, li[k].Shard
		switch x.Outcome {
		case lease.Hit, lease.Credited:
			local[i] = true
			results[i] = leasedResult(l, s, Allow, WithinLimit, x.Left, 0, x.Deadline(), now)
		case lease.Deny:
			retry := time.Duration(x.DenyUntil() - now)
			results[i] = leasedResult(l, s, Deny, OverLimit, 0, max(0, jitter(retry)), x.Deadline(), now)
		default:
			e.obs.LeaseFallback()
			toStrict(i, s)
		}
	}
	if len(strictShards) > 0 {
		// All-or-nothing with the leased items through the refunds below.
		e.decideShards(ctx, strictShards, strict, items, results)
	}
	decision := requestDecision(items, results)
	if decision == Deny && len(items) > 1 {
		for k := range sp {
			if i := at[k]; local[i] {
				sp[k].Refund(items[i].op.Cost)
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
