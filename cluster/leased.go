package cluster

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/lease"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// checkLeased decides a LEASED request from this node's lease table. An
// item whose budget is missing (first use, or spent) waits for a grant that
// carries its cost (see lease.Table.Spend); items the grants did not cover
// are decided strictly. Remaining and reset in a leased
// answer describe this node's view: remaining is the budget this node still
// holds for the bucket (other nodes hold their own), and reset_after is
// when that budget's lease ends.
func (n *Node) checkLeased(ctx context.Context, items []item) ([]*pb.ItemResult, pb.Decision) {
	lt := n.leases
	n.mu.RLock()
	r := n.mu.ring
	n.mu.RUnlock()
	results := make([]*pb.ItemResult, len(items))
	local := make([]bool, len(items)) // items spent from, for refunds
	strict := map[int][]int{}
	var strictShards []int
	li := make([]lease.Item, len(items))
	for i, it := range items {
		h := keyhash.Sum(it.op.Key)
		li[i] = lease.Item{Key: it.op.Key, Hash: h, Limit: it.op.Limit, Cost: it.op.Cost, Shard: r.ShardForHash(h)}
	}
	sp := lt.Spend(ctx, li)
	for i, x := range sp {
		l, s := li[i].Limit, li[i].Shard
		switch x.Outcome {
		case lease.Hit, lease.Credited:
			local[i] = true
			results[i] = leasedResult(l, s, pb.Decision_DECISION_ALLOW, pb.Reason_REASON_WITHIN_LIMIT, x.Left, 0, x.Deadline())
			results[i].Algorithm = items[i].algorithm()
		case lease.Deny:
			retry := time.Duration(x.DenyUntil() - time.Now().UnixNano())
			results[i] = leasedResult(l, s, pb.Decision_DECISION_DENY, pb.Reason_REASON_OVER_LIMIT, 0, max(0, jitter(retry)), x.Deadline())
			results[i].Algorithm = items[i].algorithm()
		default:
			n.metrics.leaseStrict.Inc()
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
	decision := requestDecision(items, results)
	if decision == pb.Decision_DECISION_DENY && len(items) > 1 {
		for i, spent := range local {
			if spent {
				sp[i].Refund(items[i].op.Cost)
				results[i].Decision, results[i].Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_REFUNDED
			}
		}
		if len(strictShards) > 0 {
			n.refundAcrossShards(strictShards, strict, items, results)
		}
	}
	return results, decision
}

// leasedResult answers from this node's view: left is what its lease (or
// credit) still allows, and the reset is when that lease ends.
func leasedResult(l fsm.Limit, s int, d pb.Decision, r pb.Reason, left int64, retry time.Duration, deadline int64) *pb.ItemResult {
	now := time.Now().UnixNano()
	return &pb.ItemResult{
		Decision: d, Reason: r, Limit: l.Capacity(), Remaining: left,
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

// newLeaseShed makes the counter of lease-path work shed because a bounded
// queue was full, stores it in *c and returns it for registration.
func newLeaseShed(c **prometheus.CounterVec) *prometheus.CounterVec {
	*c = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_lease_shed_total",
		Help: "Lease-path work dropped because a bounded queue was full, by queue: grant (a renewal signal; the next round retries), credit_slot (no credit asked for the name).",
	}, []string{"queue"})
	return *c
}

// Shed implements lease.Metrics.
func (m *metrics) Shed(queue string) { m.leaseShed.WithLabelValues(queue).Inc() }

// leaseShards is the lease table's way to the shards: the node's submit,
// never atomic (grants, returns and credits are independent ops).
type leaseShards struct{ n *Node }

var _ lease.Submitter = leaseShards{}

func (s leaseShards) Submit(ctx context.Context, shard int, ops []fsm.Op) (lease.Applied, error) {
	a, err := s.n.submit(ctx, shard, ops, false)
	return lease.Applied{Results: a.Results, Index: a.Index, Now: a.Now}, err
}
