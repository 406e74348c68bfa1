package clustertest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// sumMetric adds a metric over every node of c.
func sumMetric(c *clustertest.Cluster, name string, match ...string) float64 {
	var sum float64
	for i := range c.Nodes {
		sum += c.Metric(i, name, match...)
	}
	return sum
}

// TestLeaseCredits: with shard credits (the default), the first leased
// check of a key a node has never leased is decided on the node, without a
// grant. And keys that are fresh when heavy traffic starts on all three
// nodes at once, so that every node spends credits on them before any
// lease exists, still never see more ALLOWs than a strict token bucket
// allows.
func TestLeaseCredits(t *testing.T) {
	const shards = 4
	c := clustertest.Start(t, 3, clustertest.Options{Shards: shards})

	// A node asks a shard for its credit on its first leased miss there.
	w := 0
	await.Until(t, 15*time.Second, func() error {
		var short []string
		for n := range c.Nodes {
			if c.Metric(n, "quorate_lease_credits_total", `result="granted"`) < shards {
				short = append(short, c.Nodes[n].ID)
				for k := range 8 {
					if _, err := leasedCheck(c, n, leasedItem(fmt.Sprintf("warm:%d:%d:%d", n, w, k), 1000, time.Second, 0)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		w++
		if len(short) > 0 {
			return fmt.Errorf("%v did not get a credit from every shard", short)
		}
		return nil
	})

	// Fresh keys, one check each: decided from credits.
	const fresh = 300
	decided0 := sumMetric(c, "quorate_leased_credit_decisions_total")
	acquired0 := sumMetric(c, "quorate_lease_grants_total", `result="acquired"`)
	began := time.Now()
	for k := range fresh {
		resp, err := leasedCheck(c, k%3, leasedItem(fmt.Sprintf("fresh:%d", k), 1000, time.Second, 0))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("fresh key %d denied: %v", k, resp.GetResults()[0])
		}
	}
	took := time.Since(began)
	decided := sumMetric(c, "quorate_leased_credit_decisions_total") - decided0
	acquired := sumMetric(c, "quorate_lease_grants_total", `result="acquired"`) - acquired0
	t.Logf("%d fresh keys checked once each in %s: %.0f decided from credits, %.0f leases acquired",
		fresh, took.Round(time.Millisecond), decided, acquired)
	// A key the credit's filter mistakes for an existing bucket (about 1%)
	// is leased instead.
	if decided < 0.95*fresh || acquired > 0.05*fresh {
		t.Errorf("%.0f of %d first checks decided from credits and %.0f leases acquired; want nearly all from credits", decided, fresh, acquired)
	}

	// Fresh keys under 6× their limit from all nodes at once. A credit
	// allows 2 units on each (min(40, 10s × 20/s) ÷ 16, at most 8).
	b := bucket{capacity: 40, limit: 40, period: 2 * time.Second}
	decided0 = sumMetric(c, "quorate_leased_credit_decisions_total")
	var trs []*traffic
	var stops []func()
	for k := range 6 {
		tr := newTraffic(t, c, leasedItem(fmt.Sprintf("hammered:%d", k), b.limit, b.period, b.capacity))
		for n := range 3 {
			stops = append(stops, tr.start(n, 1, 25*time.Millisecond))
		}
		trs = append(trs, tr)
	}
	time.Sleep(4 * time.Second) // the traffic judged
	for _, stop := range stops {
		stop()
	}
	decided = sumMetric(c, "quorate_leased_credit_decisions_total") - decided0
	t.Logf("hammered keys: %.0f checks decided from credits", decided)
	if decided == 0 {
		t.Error("no check on the hammered keys was decided from a credit: the test proves nothing about credits")
	}
	for k, tr := range trs {
		ans := tr.wait()
		t0 := firstSent(ans)
		excess, at, allowed := worstPrefix(ans, b, t0)
		kt := count(ans)
		t.Logf("  key %d: %d checks, %d ALLOW over %s (a strict bucket allows %.1f); worst instant %+.1f at +%s",
			k, kt.total, allowed, ans[len(ans)-1].recv.Sub(t0).Round(time.Millisecond), b.allows(ans[len(ans)-1].recv.Sub(t0)), excess, at.Round(time.Millisecond))
		if kt.errs > 0 || kt.other+kt.failOpen > 0 {
			t.Errorf("key %d: %d RPC errors and %d unexpected answers", k, kt.errs, kt.other+kt.failOpen)
		}
		if excess > 0 {
			t.Errorf("key %d over the limit: %.1f more ALLOWs than a token bucket of %d per %s allows by +%s", k, excess, b.limit, b.period, at.Round(time.Millisecond))
		}
	}
}
