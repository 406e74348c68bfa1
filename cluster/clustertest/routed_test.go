package clustertest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The tests in this file drive the topology-aware client (client.Cluster)
// against real three-node clusters. That a check went straight to its
// shard's leader shows on the nodes: a node that decides a shard it does
// not lead forwards it, counting quorate_forwards_total, and tells the
// client in the leader hint header.

// forwards is the number of shard batches the running nodes forwarded.
func forwards(c *clustertest.Cluster) float64 {
	var sum float64
	for i := range c.Nodes {
		if c.Running(i) {
			sum += c.Metric(i, "quorate_forwards_total")
		}
	}
	return sum
}

// clusterLeaders is every shard's leader as the running node i sees it
// (its replicas' Raft view), and whether every shard has one.
func clusterLeaders(c *clustertest.Cluster, i int) ([]string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.Client(i).Status(ctx)
	if err != nil || len(st.GetShards()) == 0 {
		return nil, false
	}
	out := make([]string, len(st.GetShards()))
	for _, sh := range st.GetShards() {
		out[sh.GetId()] = sh.GetLeaderId()
		if sh.GetLeaderId() == "" {
			return out, false
		}
	}
	return out, true
}

// settledLeaders waits until every shard's leader is its preferred replica
// (where the nodes' balancer moves it while it is alive), so that no
// leadership moves during a measurement, and returns them.
func settledLeaders(t *testing.T, c *clustertest.Cluster, i int, within time.Duration) []string {
	t.Helper()
	var leaders []string
	await.Until(t, within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := c.Client(i).Status(ctx)
		cancel()
		settled := err == nil && len(st.GetShards()) > 0
		leaders = nil
		for _, sh := range st.GetShards() {
			leaders = append(leaders, sh.GetLeaderId())
			settled = settled && sh.GetLeaderId() == sh.GetReplicas()[0]
		}
		if !settled {
			return fmt.Errorf("leaders not on their preferred replicas: %v (%v)", st, err)
		}
		return nil
	})
	return leaders
}

// awaitView waits until the client's view names want as the shards'
// leaders, and returns how long that took.
func awaitView(t *testing.T, cl *client.Cluster, want []string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	// Polled every 20ms: callers report how soon the view follows.
	await.UntilEvery(t, within, 20*time.Millisecond, func() error {
		if got := cl.Topology().Leaders; !slices.Equal(got, want) {
			return fmt.Errorf("the client's leaders are %q, the cluster's %q", got, want)
		}
		return nil
	})
	return time.Since(start)
}

// oneHop sends n single-item strict checks of fresh keys through cl, and
// returns how many shard batches the nodes forwarded meanwhile, and how
// many answers carried a leader hint. Every check must be decided, on the
// shard ring.BucketKey puts its item on.
func oneHop(t *testing.T, c *clustertest.Cluster, cl *client.Cluster, prefix string, n int) (fwd float64, hinted uint64) {
	t.Helper()
	r, err := ring.New(len(cl.Topology().Leaders))
	if err != nil {
		t.Fatal(err)
	}
	before, hintsBefore, start := forwards(c), cl.Stats().Hinted, time.Now()
	defer func() { t.Logf("%d checks (%s) in %s", n, prefix, time.Since(start).Round(time.Millisecond)) }()
	for k := range n {
		it := clustertest.Item("api", fmt.Sprintf("%s:%d", prefix, k), 100, time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := cl.Check(ctx, &pb.CheckRequest{Items: []*pb.Item{it}})
		cancel()
		if err != nil {
			t.Fatalf("check %d: %v", k, err)
		}
		res := resp.GetResults()[0]
		if res.GetDecision() != pb.Decision_DECISION_ALLOW || res.GetIndex() == 0 {
			t.Fatalf("check %d of a fresh key: %v, want ALLOW decided by its shard", k, res)
		}
		if want := r.ShardFor(ring.BucketKey(it.GetName(), it.GetKey())); res.GetShard() != int64(want) {
			t.Fatalf("key %s decided on shard %d, client's ring says %d", it.GetKey(), res.GetShard(), want)
		}
	}
	return forwards(c) - before, cl.Stats().Hinted - hintsBefore
}

// TestRoutedClientOneHop: with leaders settled, every single-shard strict
// check the routed client sends is decided by its shard's leader: no node
// forwards anything and no answer carries a hint, where the same checks
// sent round-robin are mostly forwarded. And the hint header is set exactly
// when a node forwards.
func TestRoutedClientOneHop(t *testing.T) {
	start := time.Now()
	c := clustertest.Start(t, 3, clustertest.Options{})
	started := time.Since(start)
	leaders := settledLeaders(t, c, 0, 30*time.Second)
	t.Logf("cluster ready in %s, leaders settled %s later", started.Round(time.Millisecond), (time.Since(start) - started).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.DialCluster(ctx, []string{c.Nodes[1].RPC}, client.WithDialOptions(c.DialOptions("app")...)) // one seed
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	awaitView(t, cl, leaders, 5*time.Second)
	if top := cl.Topology(); len(top.Nodes) != 3 || top.Shards != 16 {
		t.Fatalf("topology %+v", top)
	}

	routedFwd, routedHinted := oneHop(t, c, cl, "leader", 200)
	if routedFwd != 0 || routedHinted != 0 {
		t.Errorf("routed: the nodes forwarded %v batches and %d answers carried a hint for 200 checks; want 0 and 0", routedFwd, routedHinted)
	}
	if st := cl.Stats(); st.Unrouted != 0 || st.Retried != 0 {
		t.Errorf("routed client stats %+v", st)
	}

	// The control: the measure sees forwarding when there is some.
	spread, err := client.DialCluster(ctx, []string{c.Nodes[0].RPC}, client.WithRouting(client.RouteAny), client.WithDialOptions(c.DialOptions("app")...))
	if err != nil {
		t.Fatal(err)
	}
	defer spread.Close()
	fwd, hinted := oneHop(t, c, spread, "any", 200)
	if fwd < 60 || hinted < 60 {
		t.Errorf("round-robin: the nodes forwarded %v batches and %d answers carried a hint for 200 checks; want about 130 each", fwd, hinted)
	}
	t.Logf("200 checks: routed %v forwarded, %d hinted; round-robin %v forwarded, %d hinted", routedFwd, routedHinted, fwd, hinted)

	// The hint itself: a node that forwards a strict check's shard names
	// the leader in the response header; the leader sets none, nor does
	// any node on a leased check.
	it := clustertest.Item("api", "user:hint", 100, time.Hour)
	r, _ := ring.New(len(leaders))
	shard := r.ShardFor(ring.BucketKey(it.GetName(), it.GetKey()))
	leader := slices.IndexFunc(c.Nodes, func(n *clustertest.Node) bool { return n.ID == leaders[shard] })
	call := func(node int, mode pb.Mode) []string {
		var md metadata.MD
		if _, err := pb.NewRateLimiterClient(c.Client(node).Conn()).Check(ctx, &pb.CheckRequest{Mode: mode, Items: []*pb.Item{it}}, grpc.Header(&md)); err != nil {
			t.Fatal(err)
		}
		return md.Get(pb.LeaderHintHeader)
	}
	other := (leader + 1) % 3
	if got, want := call(other, pb.Mode_MODE_STRICT), []string{pb.FormatLeaderHint(shard, leaders[shard])}; !slices.Equal(got, want) {
		t.Errorf("check at a follower: hint %q, want %q", got, want)
	}
	if got := call(leader, pb.Mode_MODE_STRICT); len(got) != 0 {
		t.Errorf("check at the leader: hint %q, want none", got)
	}
	if got := call(other, pb.Mode_MODE_LEASED); len(got) != 0 {
		t.Errorf("leased check: hint %q, want none", got)
	}
	if now, _ := clusterLeaders(c, 0); !slices.Equal(now, leaders) {
		t.Errorf("leaders moved during the test: %q, then %q", leaders, now)
	}
}

// TestRoutedClientLeaderChange: when a node dies, checks through the
// routed client keep being answered (none fails while two nodes are up),
// the client learns the new leaders within a bounded time and sends every
// check to them again; when the node comes back and the balancer hands its
// shards back, the client follows again.
func TestRoutedClientLeaderChange(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	leaders := settledLeaders(t, c, 0, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.DialCluster(ctx, []string{c.Nodes[0].RPC, c.Nodes[1].RPC, c.Nodes[2].RPC}, client.WithDialOptions(c.DialOptions("app")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	awaitView(t, cl, leaders, 5*time.Second)

	// n1 leads some shards (its preferred ones).
	const victim = 0
	led := 0
	for _, l := range leaders {
		if l == c.Nodes[victim].ID {
			led++
		}
	}
	if led == 0 {
		t.Fatalf("n1 leads no shard: %q", leaders)
	}
	// Kill n1, then send checks all along: none may fail while a majority
	// is up. (A check in flight at n1 when it dies fails: its outcome is
	// unknown. So the checks start once the client's connection has seen
	// the close.)
	c.Kill(victim)
	killed := time.Now()
	// The client's connections are its own and it shows no state of
	// them: this is the one wait here for a time, for the close to reach
	// the connection to n1 before the checks start.
	time.Sleep(100 * time.Millisecond)
	stop, done := make(chan struct{}), make(chan struct{})
	var rpcErrs []error
	var decided, unavailable int
	go func() {
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			it := clustertest.Item("api", fmt.Sprintf("bg:%d", k), 100, time.Hour)
			cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, err := cl.Check(cctx, &pb.CheckRequest{Items: []*pb.Item{it}})
			cancel()
			switch {
			case err != nil:
				rpcErrs = append(rpcErrs, err)
			case resp.GetResults()[0].GetReason() == pb.Reason_REASON_UNAVAILABLE:
				unavailable++ // an election: the item's fail mode answered
			default:
				decided++
			}
			time.Sleep(5 * time.Millisecond) // the client's pace
		}
	}()

	// The survivors elect new leaders for n1's shards; the client must
	// follow within a few refresh intervals of the cluster settling.
	var after []string
	await.Until(t, 20*time.Second, func() error {
		l, ok := clusterLeaders(c, 1)
		if ok && !slices.Contains(l, c.Nodes[victim].ID) {
			if l2, ok2 := clusterLeaders(c, 2); ok2 && slices.Equal(l, l2) {
				after = l
				return nil
			}
		}
		return fmt.Errorf("no new leaders after the kill: %q", l)
	})
	electedIn := time.Since(killed)
	learnedIn := awaitView(t, cl, after, 5*time.Second)
	if top := cl.Topology(); top.Nodes[c.Nodes[victim].ID] != "" {
		// Gossip takes a few seconds to declare it dead; until then it
		// stays in the view, and checks that try it go elsewhere.
		t.Logf("n1 still in the view (gossip has not declared it dead yet)")
	}
	close(stop)
	<-done
	fwd, hinted := oneHop(t, c, cl, "after-kill", 200)
	if fwd != 0 || hinted != 0 {
		t.Errorf("after the kill: %v batches forwarded, %d answers hinted for 200 checks; want 0", fwd, hinted)
	}
	if len(rpcErrs) > 0 {
		t.Errorf("%d checks failed with a node down, first: %v", len(rpcErrs), rpcErrs[0])
	}
	t.Logf("kill of n1 (leader of %d shards): new leaders after %s, in the client's view %s later; %d checks decided, %d UNAVAILABLE meanwhile; client stats %+v",
		led, electedIn.Round(time.Millisecond), learnedIn.Round(time.Millisecond), decided, unavailable, cl.Stats())

	// Back: the balancer hands n1's preferred shards back by leadership
	// transfer, and the client follows.
	c.Restart(victim)
	c.WaitReady(30*time.Second, victim)
	back := settledLeaders(t, c, 1, 60*time.Second)
	learnedIn = awaitView(t, cl, back, 5*time.Second)
	fwd, hinted = oneHop(t, c, cl, "after-transfer", 200)
	if fwd != 0 || hinted != 0 {
		t.Errorf("after the transfers back: %v batches forwarded, %d answers hinted for 200 checks; want 0", fwd, hinted)
	}
	t.Logf("n1 back: the client's view followed the transfers %s after they settled", learnedIn.Round(time.Millisecond))
}
