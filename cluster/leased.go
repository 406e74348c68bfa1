package cluster

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// checkLeased decides a LEASED request from this node's lease table. An
// item whose budget is missing (first use, or spent) waits for a grant that
// carries its cost (see acquire); items the grants did not cover are
// decided strictly. Remaining and reset in a leased
// answer describe this node's view: remaining is the budget this node still
// holds for the bucket (other nodes hold their own), and reset_after is
// when that budget's lease ends.
func (n *Node) checkLeased(ctx context.Context, items []item) ([]*pb.ItemResult, pb.Decision) {
	lt := n.leases
	n.mu.RLock()
	r := n.mu.ring
	n.mu.RUnlock()
	results := make([]*pb.ItemResult, len(items))
	local := make([]*leaseEntry, len(items)) // entries spent from, for refunds
	strict := map[int][]int{}
	var strictShards []int
	sp := lt.spendItems(ctx, r, items)
	for i, x := range sp {
		switch x.out {
		case spendHit:
			local[i] = x.e
			results[i] = leasedResult(x.e, x.shard, pb.Decision_DECISION_ALLOW, pb.Reason_REASON_WITHIN_LIMIT, x.left, 0, x.e.deadline.Load())
		case spendCredit:
			local[i] = x.e
			results[i] = leasedResult(x.e, x.shard, pb.Decision_DECISION_ALLOW, pb.Reason_REASON_WITHIN_LIMIT, x.left, 0, x.credit.cr.deadline)
		case spendDeny:
			retry := time.Duration(x.e.denyUntil.Load() - time.Now().UnixNano())
			results[i] = leasedResult(x.e, x.shard, pb.Decision_DECISION_DENY, pb.Reason_REASON_OVER_LIMIT, 0, max(0, retry), x.e.deadline.Load())
		default:
			n.metrics.leaseStrict.Inc()
			if _, ok := strict[x.shard]; !ok {
				strictShards = append(strictShards, x.shard)
			}
			strict[x.shard] = append(strict[x.shard], i)
		}
	}
	for _, s := range strictShards {
		// Decided one item at a time: strictly decided items of a leased
		// request are all-or-nothing through the refunds below.
		n.decideShard(ctx, s, strict[s], items, results)
	}
	decision := pb.Decision_DECISION_ALLOW
	for _, res := range results {
		if res.Decision != pb.Decision_DECISION_ALLOW {
			decision = pb.Decision_DECISION_DENY
		}
	}
	if decision == pb.Decision_DECISION_DENY && len(items) > 1 {
		for i, e := range local {
			if e != nil {
				if sp[i].out == spendCredit {
					e.refundCredit(sp[i].credit, items[i].op.Cost)
				} else {
					e.refund(items[i].op.Cost)
				}
				results[i].Decision, results[i].Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_REFUNDED
			}
		}
		if len(strictShards) > 0 {
			n.refundAcrossShards(strictShards, strict, items, results)
		}
	}
	return results, decision
}

// spent is how one item of a leased request was decided locally.
type spent struct {
	shard  int
	e      *leaseEntry
	out    spendOutcome
	left   int64
	credit creditSpend // when out is spendCredit
}

// spendItems spends each item from its lease. Items that find no budget
// join their grants, all before any waits, so the grants of a many-item
// request go out together, and are spent again once those land.
func (lt *leaseTable) spendItems(ctx context.Context, r *ring.Ring, items []item) []spent {
	sp := make([]spent, len(items))
	var missed []int
	for i, it := range items {
		s := r.ShardFor(it.op.Key)
		e := lt.entry(it, s)
		now := time.Now().UnixNano()
		out, left := lt.spend(e, it.op.Cost, now)
		sp[i] = spent{shard: s, e: e, out: out, left: left}
		if out == spendMiss {
			if c, ok := lt.credits.spend(e, it.op.Cost, now); ok {
				sp[i].out, sp[i].left, sp[i].credit = spendCredit, c.left, c
				lt.n.metrics.creditDecisions.Inc()
			}
		}
		ls := lt.shardOf(e.hash)
		if sp[i].out == spendMiss {
			ls.misses.Add(1)
			missed = append(missed, i)
		} else {
			ls.hits.Add(1)
		}
	}
	waits := make([]*attempt, len(missed))
	for j, i := range missed {
		if waits[j] = lt.join(sp[i].e, items[i].op.Cost); waits[j] != nil {
			lt.signal(sp[i].e)
		}
	}
	for j, i := range missed {
		lt.acquire(ctx, sp[i].e, waits[j])
		sp[i].out, sp[i].left = lt.spend(sp[i].e, items[i].op.Cost, time.Now().UnixNano())
	}
	return sp
}

// leasedResult answers from this node's view: left is what its lease (or
// credit) still allows, and the reset is when that lease ends.
func leasedResult(e *leaseEntry, s int, d pb.Decision, r pb.Reason, left int64, retry time.Duration, deadline int64) *pb.ItemResult {
	now := time.Now().UnixNano()
	return &pb.ItemResult{
		Decision: d, Reason: r, Limit: e.limit.Capacity(), Remaining: left,
		ResetAfter:        durationpb.New(time.Duration(max(0, deadline-now))),
		RetryAfter:        durationpb.New(retry),
		Delay:             durationpb.New(0),
		Shard:             int64(s),
		DecidedAtUnixNano: now,
	}
}

// leasable reports an item that leased mode cannot serve.
func leasable(items []item) error {
	for i, it := range items {
		if !it.op.Limit.Algorithm.Leasable() {
			return badRequest(fieldName(i, "algorithm"), "%s cannot be leased (a %s needs every decision in order); use mode STRICT", it.op.Limit.Algorithm, it.op.Limit.Algorithm)
		}
		if it.op.IdempotencyKey != "" {
			return badRequest(fieldName(i, "idempotency_key"), "not supported in mode LEASED (a local decision cannot be deduplicated across nodes); use mode STRICT")
		}
	}
	return nil
}
