package clustertest_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func check(t *testing.T, c *clustertest.Cluster, node int, items ...*pb.Item) (*pb.CheckResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return c.Client(node).Check(ctx, &pb.CheckRequest{Items: items})
}

// leaderOf checks item once at node 0 (one unit) to learn its shard, and
// returns the shard and the node that leads it.
func leaderOf(t *testing.T, c *clustertest.Cluster, item *pb.Item) (shard, leader int) {
	t.Helper()
	resp, err := check(t, c, 0, item)
	if err != nil {
		t.Fatal(err)
	}
	shard = int(resp.GetResults()[0].GetShard())
	if leader = c.ShardLeader(0, shard); leader < 0 {
		t.Fatalf("no leader for shard %d", shard)
	}
	return shard, leader
}

// TestStrictExactness: 300 concurrent checks spread over three nodes against
// a limit of 100 per minute allow exactly 100.
func TestStrictExactness(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	item := clustertest.Item("api", "user:exact", 100, time.Minute)
	var allowed, denied atomic.Int64
	var mu sync.Mutex
	first, last := int64(math.MaxInt64), int64(0) // state-machine times of the decisions
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			resp, err := check(t, c, i%3, item)
			switch {
			case err != nil:
				t.Error(err)
				return
			case resp.GetDecision() == pb.Decision_DECISION_ALLOW:
				allowed.Add(1)
			case resp.GetResults()[0].GetReason() == pb.Reason_REASON_OVER_LIMIT:
				denied.Add(1)
			default:
				t.Errorf("unexpected result %v", resp)
				return
			}
			at := resp.GetResults()[0].GetDecidedAtUnixNano()
			mu.Lock()
			first, last = min(first, at), max(last, at)
			mu.Unlock()
		})
	}
	wg.Wait()
	// 100 per minute refills a token every 600ms: if the 300 checks took
	// longer than that (a loaded machine), the bucket exactly allows those
	// refills too, by the state machine's own clock.
	refill := (last - first) * 100 / int64(time.Minute)
	if a := allowed.Load(); a < 100 || a > 100+refill || a+denied.Load() != 300 {
		t.Fatalf("allowed %d, denied %d of 300 over %s; want exactly 100 (+%d refilled)", a, denied.Load(), time.Duration(last-first), refill)
	}
	t.Logf("allowed %d of 300 (limit 100, %d refilled in the %s the checks took)", allowed.Load(), refill, time.Duration(last-first))
}

// TestForwardedCheck: a check sent to a node that does not lead the key's
// shard is forwarded to the leader and decided correctly.
func TestForwardedCheck(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	item := clustertest.Item("api", "user:fwd", 10, time.Hour)
	_, leader := leaderOf(t, c, item)
	other := (leader + 1) % 3
	before := c.Metric(other, "quorate_forwards_total", `result="ok"`)
	for want := int64(8); want >= 0; want-- {
		resp, err := check(t, c, other, item)
		if err != nil {
			t.Fatal(err)
		}
		r := resp.GetResults()[0]
		if resp.GetDecision() != pb.Decision_DECISION_ALLOW || r.GetRemaining() != want {
			t.Fatalf("forwarded check: %v, want ALLOW with %d remaining", resp, want)
		}
	}
	resp, err := check(t, c, other, item)
	if err != nil || resp.GetDecision() != pb.Decision_DECISION_DENY {
		t.Fatalf("11th check of 10: %v %v, want DENY", resp, err)
	}
	if got := c.Metric(other, "quorate_forwards_total", `result="ok"`) - before; got < 10 {
		t.Fatalf("node %d forwarded %v batches, want >= 10", other, got)
	}
}

// TestBadInput: every malformed request gets InvalidArgument naming the
// field, and consumes nothing.
func TestBadInput(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	good := func() *pb.Item { return clustertest.Item("api", "user:bad", 5, time.Hour) }
	with := func(f func(*pb.Item)) []*pb.Item { it := good(); f(it); return []*pb.Item{it} }
	many := make([]*pb.Item, 1001)
	for i := range many {
		many[i] = good()
	}
	cases := []struct {
		name  string
		items []*pb.Item
		field string
	}{
		{"no items", nil, "items"},
		{"too many items", many, "items"},
		{"empty key", with(func(i *pb.Item) { i.Key = "" }), "items[0].key"},
		{"key too long", with(func(i *pb.Item) { i.Key = strings.Repeat("k", 2000) }), "items[0].key"},
		{"empty name", with(func(i *pb.Item) { i.Name = "" }), "items[0].name"},
		{"unknown algorithm", with(func(i *pb.Item) { i.Algorithm = 99 }), "items[0].algorithm"},
		{"unspecified algorithm", with(func(i *pb.Item) { i.Algorithm = 0 }), "items[0].algorithm"},
		{"zero limit", with(func(i *pb.Item) { i.Limit = 0 }), "items[0].limit"},
		{"negative limit", with(func(i *pb.Item) { i.Limit = -3 }), "items[0].limit"},
		{"no period", with(func(i *pb.Item) { i.Period = nil }), "items[0].period"},
		{"tiny period", with(func(i *pb.Item) { i.Period = durationpb.New(time.Nanosecond) }), "items[0].period"},
		{"cost above capacity", with(func(i *pb.Item) { i.Cost = 6 }), "items[0].cost"},
		{"negative cost", with(func(i *pb.Item) { i.Cost = -1 }), "items[0].cost"},
		{"negative burst", with(func(i *pb.Item) { i.Burst = -1 }), "items[0].burst"},
		{"bad second item", append([]*pb.Item{good()}, with(func(i *pb.Item) { i.Key = "" })...), "items[1].key"},
	}
	for _, tc := range cases {
		_, err := check(t, c, 1, tc.items...)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: got %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name  string
		item  *pb.Item
		field string
	}{
		{"leased sliding log", with(func(i *pb.Item) { i.Algorithm = pb.Algorithm_ALGORITHM_SLIDING_LOG })[0], "items[0].algorithm"},
		{"leased shaping", with(func(i *pb.Item) { i.Algorithm = pb.Algorithm_ALGORITHM_LEAKY_BUCKET_SHAPING })[0], "items[0].algorithm"},
		{"leased idempotency key", with(func(i *pb.Item) { i.IdempotencyKey = "req-1" })[0], "items[0].idempotency_key"},
	} {
		_, err := c.Client(0).Check(ctx, &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: []*pb.Item{tc.item}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: got %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
	}
	resp, err := check(t, c, 2, good())
	if err != nil || resp.GetResults()[0].GetRemaining() != 4 {
		t.Fatalf("after the bad requests: %v %v, want 4 of 5 remaining (nothing consumed)", resp, err)
	}
}

// TestDurabilityAcrossFullRestart: consume 60 of 100, kill -9 every node,
// restart them: the bucket is still spent.
func TestDurabilityAcrossFullRestart(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	item := clustertest.Item("api", "user:durable", 100, time.Hour)
	for i := range 60 {
		resp, err := check(t, c, i%3, item)
		if err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("check %d: %v %v", i, resp, err)
		}
	}
	for i := range 3 {
		c.Kill(i)
	}
	for i := range 3 {
		c.Restart(i)
	}
	c.WaitReady(60*time.Second, 0, 1, 2)
	resp, err := check(t, c, 1, item)
	if err != nil {
		t.Fatal(err)
	}
	// 100 per hour refills one token per 36s; the test takes far less,
	// but allow one in case it ran slow.
	if r := resp.GetResults()[0].GetRemaining(); resp.GetDecision() != pb.Decision_DECISION_ALLOW || r < 39 || r > 40 {
		t.Fatalf("after restart: %v, want ALLOW with 39 remaining (60 + 1 consumed)", resp)
	}
}

// TestKillLeaderMidStream: kill -9 the leader of a key's shard during a
// stream of checks. Checks resume after an election, and the ALLOWs the
// clients saw never exceed the limit.
func TestKillLeaderMidStream(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	const limit = 100
	item := clustertest.Item("api", "user:failover", limit, time.Hour)
	resp, err := check(t, c, 0, item)
	if err != nil {
		t.Fatal(err)
	}
	allowed := atomic.Int64{}
	allowed.Add(1)
	s := int(resp.GetResults()[0].GetShard())
	victim := c.ShardLeader(0, s)
	if victim < 0 {
		t.Fatal("no leader")
	}

	var killed atomic.Bool
	var mu sync.Mutex
	var decided []time.Time
	var unavailable, rpcErrs int
	// The clients run for 8s around the kill: the interval is what is
	// measured (decisions before and after, the longest gap).
	stop := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			node := w % 3
			for time.Now().Before(stop) {
				if killed.Load() && node == victim {
					node = (node + 1) % 3
				}
				resp, err := check(t, c, node, item)
				mu.Lock()
				switch {
				case err != nil:
					rpcErrs++
				case resp.GetResults()[0].GetReason() == pb.Reason_REASON_UNAVAILABLE:
					unavailable++
				default:
					decided = append(decided, time.Now())
					if resp.GetDecision() == pb.Decision_DECISION_ALLOW {
						allowed.Add(1)
					}
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // each client's pace
			}
		})
	}
	// Decisions before the kill, for the gap to be measured from.
	await.True(t, 30*time.Second, "checks decided before the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(decided) >= 20
	})
	if v := c.ShardLeader((victim+1)%3, s); v >= 0 {
		victim = v // leadership may have moved to its preferred replica
	}
	killAt := time.Now()
	killed.Store(true)
	c.Kill(victim)
	wg.Wait()

	// A token bucket of 100 per hour allows at most 100 plus its refill
	// over the test.
	bound := int64(limit + 1)
	if allowed.Load() > bound {
		t.Fatalf("clients saw %d ALLOWs, limit allows %d", allowed.Load(), bound)
	}
	var gap time.Duration
	resumed := false
	for i := 1; i < len(decided); i++ {
		gap = max(gap, decided[i].Sub(decided[i-1]))
		resumed = resumed || decided[i].After(killAt.Add(time.Second))
	}
	if !resumed {
		t.Fatalf("no check was decided after the leader was killed (%d unavailable, %d rpc errors)", unavailable, rpcErrs)
	}
	t.Logf("leader %s killed: %d ALLOWs (limit %d), %d decided, %d UNAVAILABLE, %d RPC errors, longest gap between decisions %s",
		c.Nodes[victim].ID, allowed.Load(), limit, len(decided), unavailable, rpcErrs, gap.Round(time.Millisecond))

	// Every shard had a replica on the dead node: once gossip declares it
	// dead, the survivors report every shard under-replicated.
	survivor := (victim + 1) % 3
	var shards int
	await.Until(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := c.Client(survivor).Status(ctx)
		cancel()
		if err != nil || len(st.GetUnderReplicated()) != len(st.GetShards()) || len(st.GetShards()) == 0 {
			return fmt.Errorf("after the kill, %s reports under-replicated shards %v of %d (%v)", c.Nodes[survivor].ID, st.GetUnderReplicated(), len(st.GetShards()), err)
		}
		shards = len(st.GetShards())
		return nil
	})
	t.Logf("under-replicated shards reported %v after the kill", time.Since(killAt).Round(time.Millisecond))
	if got := c.Metric(survivor, "quorate_shards_under_replicated"); got != float64(shards) {
		t.Errorf("quorate_shards_under_replicated = %v on %s; want %d", got, c.Nodes[survivor].ID, shards)
	}
	_ = fmt.Sprint()
}

// TestFiveNodes: with more nodes than replicas (5 and 3), every node hosts
// only some shards, yet becomes ready and decides checks of every shard,
// and finds a shard's new leader when the old one dies.
func TestFiveNodes(t *testing.T) {
	c := clustertest.Start(t, 5, clustertest.Options{Shards: 8}) // Start waits for every node to be ready
	item := func(k int) *pb.Item { return clustertest.Item("api", fmt.Sprintf("five:%d", k), 3, time.Hour) }
	shards := map[int64]bool{}
	for k := range 40 {
		for node := range 5 {
			resp, err := check(t, c, node, item(k))
			if err != nil {
				t.Fatalf("n%d, key %d: %v", node+1, k, err)
			}
			r := resp.GetResults()[0]
			shards[r.GetShard()] = true
			// 3 per hour: the first three checks of a key allow, the rest deny.
			if want := node < 3; (r.GetDecision() == pb.Decision_DECISION_ALLOW) != want || r.GetIndex() == 0 {
				t.Fatalf("n%d, key %d, check %d: %v, want allow=%v decided by a shard", node+1, k, node+1, r, want)
			}
		}
	}
	if len(shards) != 8 {
		t.Fatalf("40 keys reached %d of 8 shards", len(shards))
	}
	// Kill the leader of a shard that some node does not host; that node
	// must route to the new leader.
	s, leader := leaderOf(t, c, item(0))
	c.Kill(leader)
	for node := range 5 {
		if node == leader {
			continue
		}
		// Until decided by the shard's new leader: the key is still spent.
		await.Until(t, 20*time.Second, func() error {
			resp, err := check(t, c, node, item(0))
			if err == nil && resp.GetResults()[0].GetReason() == pb.Reason_REASON_OVER_LIMIT {
				return nil
			}
			return fmt.Errorf("n%d: shard %d not decided after its leader n%d died: %v %v", node+1, s, leader+1, resp, err)
		})
	}
}
