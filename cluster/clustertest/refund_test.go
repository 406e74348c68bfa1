package clustertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The tests in this file send multi-item requests that span shards and are
// denied by one item, then show with later checks that nothing the request
// allowed elsewhere stayed consumed: a denied request costs its caller
// nothing, strict or leased.

// keysOnShards probes keys name:prefix:0, :1, ... with a one-unit strict
// check each (so each bucket starts one unit down) until it has two keys on
// one shard and a third on another. It returns them in that order.
func keysOnShards(t *testing.T, c *clustertest.Cluster, prefix string, limit int64) (same1, same2, other *pb.Item) {
	t.Helper()
	byShard := map[int64][]*pb.Item{}
	for i := range 64 {
		it := clustertest.Item("refund", fmt.Sprintf("%s:%d", prefix, i), limit, time.Hour)
		resp, err := check(t, c, 0, it)
		if err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("probe %s: %v %v", it.GetKey(), resp, err)
		}
		s := resp.GetResults()[0].GetShard()
		byShard[s] = append(byShard[s], it)
		for s1, a := range byShard {
			for s2, b := range byShard {
				if s1 != s2 && len(a) >= 2 && len(b) >= 1 {
					return a[0], a[1], b[0]
				}
			}
		}
	}
	t.Fatal("64 keys did not spread over two shards")
	return nil, nil, nil
}

// withCost is a copy of it asking for cost units.
func withCost(it *pb.Item, cost int64) *pb.Item {
	cp := proto.Clone(it).(*pb.Item)
	cp.Cost = cost
	return cp
}

// TestStrictDeniedRequestRefundsEveryShard: a strict request takes 3 units
// from a key on shard X and 4 from a key on shard Y, and is denied by a
// second key on X that asks for more than it has. The take on X is undone
// in the same log entry (all-or-nothing within a shard); the take on Y by a
// compensating refund (refundAcrossShards). Afterwards both keys still
// allow their whole remaining budget, and not one unit more.
func TestStrictDeniedRequestRefundsEveryShard(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4})
	const limit = 10 // each probed key is left with 9
	a, deny, b := keysOnShards(t, c, "strict", limit)
	refunds0 := sumMetric(c, "quorate_cross_shard_refunds_total", `result="ok"`)
	for node := range c.Nodes {
		resp, err := check(t, c, node, withCost(a, 3), withCost(b, 4), withCost(deny, limit))
		if err != nil {
			t.Fatal(err)
		}
		rs := resp.GetResults()
		if resp.GetDecision() != pb.Decision_DECISION_DENY || rs[2].GetReason() != pb.Reason_REASON_OVER_LIMIT ||
			rs[0].GetReason() != pb.Reason_REASON_REFUNDED || rs[1].GetReason() != pb.Reason_REASON_REFUNDED {
			t.Fatalf("request via node %d: %v; want DENY with items 0 and 1 REFUNDED, item 2 OVER_LIMIT", node, resp)
		}
	}
	if got := sumMetric(c, "quorate_cross_shard_refunds_total", `result="ok"`) - refunds0; got != 3 {
		t.Errorf("quorate_cross_shard_refunds_total{result=ok} rose by %v, want 3 (one item per request)", got)
	}
	for _, it := range []*pb.Item{a, b} {
		resp, err := check(t, c, 0, withCost(it, limit-1))
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.GetResults()[0]; resp.GetDecision() != pb.Decision_DECISION_ALLOW || r.GetRemaining() != 0 {
			t.Fatalf("%s after three denied requests: %v; want its whole remaining %d allowed: the denied requests kept units",
				it.GetKey(), r, limit-1)
		}
		if resp, err := check(t, c, 0, it); err != nil || resp.GetDecision() != pb.Decision_DECISION_DENY {
			t.Fatalf("%s once spent: %v %v; want DENY", it.GetKey(), resp, err)
		}
	}
}

// TestLeasedDeniedRequestRefundsLocalSpend: a leased request spends 2 units
// of a key from node 0's lease, and is denied by a key on another shard
// that is spent. The local spend is put back (the refund in checkLeased):
// afterwards node 0 still allows every unit the key has left, counted one
// leased check at a time, and then denies.
func TestLeasedDeniedRequestRefundsLocalSpend(t *testing.T) {
	// Leases that outlive the test: on a loaded machine a 5s lease could
	// lapse between the checks, and the units stranded in it until the
	// shard takes them back would look like units the refund kept.
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4, ExtraArgs: []string{"--lease-ttl", "1m"}})
	const limit = 20
	a, _, spent := keysOnShards(t, c, "leased", limit)
	// Drain spent (probed once already) on its shard.
	if resp, err := check(t, c, 0, withCost(spent, limit-1)); err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
		t.Fatalf("draining %s: %v %v", spent.GetKey(), resp, err)
	}
	used := int64(1) // the probe
	// Until node 0 holds a lease on a, its checks are decided by grants or
	// strictly; the denied request must find a's budget on the node.
	for local := false; !local; used++ {
		if used > 10 {
			t.Fatalf("node 0 decided none of %d leased checks of %s locally", used-1, a.GetKey())
		}
		resp, err := leasedCheck(c, 0, a)
		if err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("leased check %d of %s: %v %v", used, a.GetKey(), resp, err)
		}
		local = resp.GetResults()[0].GetIndex() == 0
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := c.Client(0).Check(ctx, &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: []*pb.Item{withCost(a, 2), spent}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		r := resp.GetResults()[0]
		if resp.GetDecision() != pb.Decision_DECISION_DENY || r.GetReason() != pb.Reason_REASON_REFUNDED || r.GetIndex() != 0 {
			t.Fatalf("denied leased request: %v; want DENY with item 0 spent locally (index 0) and REFUNDED", resp)
		}
	}
	allowed := int64(0)
	for range 4 * limit {
		resp, err := leasedCheck(c, 0, a)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetDecision() == pb.Decision_DECISION_ALLOW {
			allowed++
			continue
		}
		// A check the shard could not decide in time (a loaded machine)
		// charged nothing: only OVER_LIMIT says the units are gone.
		if r := resp.GetResults()[0].GetReason(); r != pb.Reason_REASON_OVER_LIMIT {
			t.Logf("a check of %s was not decided (%v); asked again", a.GetKey(), r)
			continue
		}
		break
	}
	if allowed != limit-used {
		t.Fatalf("after three denied requests node 0 allowed %d more checks of %s, want the %d left: the denied requests kept units",
			allowed, a.GetKey(), limit-used)
	}
}
