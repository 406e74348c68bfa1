package clustertest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/bench/accuracy"
	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// TestDenyCacheHotKeyExact: 16 clients hammer one strict key through all
// three nodes, each with its deny cache (on by default), while the bucket
// refills 10 units a second. The nodes answer most denials from memory,
// yet the bench's accountant, replaying every check at its decision time,
// finds not one admission over the limit and not one denial the limit had
// room for: a cached denial stands for a time before its bucket refilled,
// and once it has refilled the shard decides again.
func TestDenyCacheHotKeyExact(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	const limit, period = 20, 2 * time.Second
	item := clustertest.Item("api", "hot", limit, period)
	hits0 := denyCacheHits(c)
	var (
		mu       sync.Mutex
		arrivals []accuracy.Arrival
		admitted int
		cached   int
	)
	// Until the bucket has refilled twice its burst: the cache must have
	// let refills through, not only denied.
	const want = 3 * limit
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Checks in flight run to their answer: an admission left out would
	// make the accountant's replay wrong.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; !stop.Load() && ctx.Err() == nil; i++ {
				resp, err := c.Client(i%3).Check(ctx, &pb.CheckRequest{Items: []*pb.Item{item}})
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				r := resp.GetResults()[0]
				ok := resp.GetDecision() == pb.Decision_DECISION_ALLOW
				if !ok && r.GetReason() != pb.Reason_REASON_OVER_LIMIT {
					t.Errorf("check %d: %v, want allowed or over limit", i, resp)
					return
				}
				mu.Lock()
				arrivals = append(arrivals, accuracy.Arrival{Bucket: 1, At: r.GetDecidedAtUnixNano(), Cost: 1, Admitted: ok})
				if ok {
					admitted++
				} else if r.GetIndex() == 0 {
					cached++
				}
				if admitted >= want {
					stop.Store(true)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted < want {
		t.Fatalf("%d admitted in a minute, want %d: the bucket refills %d a second", admitted, want, limit/int(period.Seconds()))
	}
	rep, err := accuracy.Account(accuracy.Limit{Family: accuracy.TokenBucket, Limit: limit, Period: period}, arrivals)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d checks: %d admitted, %d allowed by the limit, over %d, under %d; %d denied from a deny cache",
		rep.Checks, rep.Admitted, rep.AllowedByLimit, rep.OverAdmitted, rep.UnderAdmitted, cached)
	if rep.OverAdmitted != 0 || rep.UnderAdmitted != 0 {
		t.Errorf("over-admitted %d, under-admitted %d; want 0 and 0", rep.OverAdmitted, rep.UnderAdmitted)
	}
	denied := int(rep.Checks) - admitted
	if hits := int(denyCacheHits(c) - hits0); cached < denied/2 || hits != cached {
		t.Errorf("%d of %d denials from the deny caches (their metrics count %d hits), want most, and counted", cached, denied, hits)
	}
}

func denyCacheHits(c *clustertest.Cluster) float64 {
	var n float64
	for i := range c.Nodes {
		n += c.Metric(i, "quorate_deny_cache_total", `outcome="hit"`)
	}
	return n
}
