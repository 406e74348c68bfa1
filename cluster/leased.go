package cluster

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// checkLeased decides a LEASED request from this node's lease table. Items
// whose budget is missing (first use, or a grant still on its way after
// AcquireWait) are decided strictly instead. Remaining and reset in a leased
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
	for i, it := range items {
		s := r.ShardFor(it.op.Key)
		e := lt.entry(it, s)
		out, left := lt.spend(e, it.op.Cost, time.Now().UnixNano())
		if out == spendMiss {
			lt.signal(e) // out of budget (or expired): ask now, not at the next round
			lt.await(ctx, e)
			out, left = lt.spend(e, it.op.Cost, time.Now().UnixNano())
		}
		ls := lt.shardOf(e.hash)
		switch out {
		case spendHit:
			ls.hits.Add(1)
			local[i] = e
			results[i] = leasedResult(e, s, pb.Decision_DECISION_ALLOW, pb.Reason_REASON_WITHIN_LIMIT, left, 0)
		case spendDeny:
			ls.hits.Add(1)
			retry := time.Duration(e.denyUntil.Load() - time.Now().UnixNano())
			results[i] = leasedResult(e, s, pb.Decision_DECISION_DENY, pb.Reason_REASON_OVER_LIMIT, 0, max(0, retry))
		default:
			ls.misses.Add(1)
			if _, ok := strict[s]; !ok {
				strictShards = append(strictShards, s)
			}
			strict[s] = append(strict[s], i)
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
				e.refund(items[i].op.Cost)
				results[i].Decision, results[i].Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_REFUNDED
			}
		}
		if len(strictShards) > 0 {
			n.refundAcrossShards(strictShards, strict, items, results)
		}
	}
	return results, decision
}

func leasedResult(e *leaseEntry, s int, d pb.Decision, r pb.Reason, left int64, retry time.Duration) *pb.ItemResult {
	now := time.Now().UnixNano()
	return &pb.ItemResult{
		Decision: d, Reason: r, Limit: e.limit.Capacity(), Remaining: left,
		ResetAfter:        durationpb.New(time.Duration(max(0, e.deadline.Load()-now))),
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
