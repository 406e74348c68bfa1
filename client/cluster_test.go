package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/ring"
	"github.com/quorate/quorate/rpc/quoratev1"
)

func item(name, key string) *quoratev1.Item {
	return &quoratev1.Item{Name: name, Key: key, Algorithm: quoratev1.Algorithm_ALGORITHM_TOKEN_BUCKET, Limit: 10, Period: durationpb.New(time.Second)}
}

// keyOn returns a key of limit "api" that lives on shard s of r.
func keyOn(t *testing.T, r *ring.Ring, s int, from int) string {
	t.Helper()
	for i := from; i < from+100000; i++ {
		k := fmt.Sprintf("k%d", i)
		if r.ShardFor(ring.BucketKey("api", k)) == s {
			return k
		}
	}
	t.Fatalf("no key on shard %d", s)
	return ""
}

func TestLeaderShard(t *testing.T) {
	r, _ := ring.New(16)
	if got := leaderShard(r, nil); got != -1 {
		t.Errorf("no items: %d, want -1", got)
	}
	// One item: its bucket's shard, spelled as the server spells it.
	for i := range 50 {
		it := item("api", fmt.Sprintf("user:%d", i))
		if got, want := leaderShard(r, []*quoratev1.Item{it}), r.ShardFor("api\x00"+it.GetKey()); got != want {
			t.Fatalf("key %s: shard %d, want %d", it.GetKey(), got, want)
		}
	}
	// The name is part of the bucket: the same key under two names may
	// live on two shards.
	differ := false
	for i := range 50 {
		k := fmt.Sprintf("user:%d", i)
		differ = differ || leaderShard(r, []*quoratev1.Item{item("a", k)}) != leaderShard(r, []*quoratev1.Item{item("b", k)})
	}
	if !differ {
		t.Error("names a and b put 50 keys on the same shards: the name is not in the bucket key")
	}
	a, b, c := keyOn(t, r, 3, 0), keyOn(t, r, 9, 0), keyOn(t, r, 12, 0)
	a2, b2 := keyOn(t, r, 3, 1000), keyOn(t, r, 9, 1000)
	b3 := keyOn(t, r, 9, 2000)
	tests := []struct {
		name string
		keys []string
		want int
	}{
		{"majority last", []string{a, b, b2}, 9},
		{"majority first", []string{b, b2, a, c}, 9},
		{"majority spread", []string{b, a, b2, c, b3, a2}, 9},
		{"tie goes to the lower shard", []string{b, a}, 3},
		{"tie of three", []string{c, b, a}, 3},
		{"same shard", []string{a, a2}, 3},
	}
	for _, tt := range tests {
		var items []*quoratev1.Item
		for _, k := range tt.keys {
			items = append(items, item("api", k))
		}
		if got := leaderShard(r, items); got != tt.want {
			t.Errorf("%s: shard %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestMergeStatus(t *testing.T) {
	alive, dead := quoratev1.NodeState_NODE_STATE_ALIVE, quoratev1.NodeState_NODE_STATE_DEAD
	nodes := []*quoratev1.NodeStatus{
		{Id: "n1", RpcAddr: "10.0.0.1:7401", State: alive},
		{Id: "n2", RpcAddr: "0.0.0.0:7402", State: quoratev1.NodeState_NODE_STATE_SUSPECT},
		{Id: "n3", RpcAddr: "10.0.0.3:7403", State: dead},
		{Id: "n4", State: alive}, // gossip only, no address
	}
	n1 := &quoratev1.StatusResponse{NodeId: "n1", Nodes: nodes, Shards: []*quoratev1.ShardStatus{
		{Id: 0, LeaderId: "n1", Term: 5},
		{Id: 1, LeaderId: "n2", Term: 4}, // stale: n2 says n1 since term 6
		{Id: 2, LeaderId: "n3", Term: 9}, // a dead node: dropped
		{Id: 3, LeaderId: "n2", Term: 0}, // a hint
	}}
	n2 := &quoratev1.StatusResponse{NodeId: "n2", Nodes: nodes, Shards: []*quoratev1.ShardStatus{
		{Id: 0, LeaderId: "n2", Term: 5}, // both claim term 5
		{Id: 1, LeaderId: "n1", Term: 6},
		{Id: 2, LeaderId: "", Term: 9},
		{Id: 3, LeaderId: "n1", Term: 0},
	}}
	v := mergeStatus([]statusAnswer{{via: "10.0.0.1:7401", resp: n1}, {via: "192.168.1.2:7402", resp: n2}})
	if v.shards != 4 {
		t.Errorf("shards %d, want 4", v.shards)
	}
	// n2 is at an unspecified host: where it was asked, not where n1 was.
	wantNodes := map[string]string{"n1": "10.0.0.1:7401", "n2": "192.168.1.2:7402"}
	if len(v.nodes) != len(wantNodes) {
		t.Errorf("nodes %v, want %v", v.nodes, wantNodes)
	}
	for id, a := range wantNodes {
		if v.nodes[id] != a {
			t.Errorf("node %s at %q, want %q (nodes %v)", id, v.nodes[id], a, v.nodes)
		}
	}
	// Shard 0: equal terms, both self-reported: the first answer's stays.
	// Shard 1: the higher term. Shard 2: the dead node's leadership is
	// dropped and nobody else is named. Shard 3: hints of equal term, the
	// first stays.
	if want := []string{"n1", "n1", "", "n2"}; !slices.Equal(v.leaders, want) {
		t.Errorf("leaders %q, want %q", v.leaders, want)
	}
	// A self-report beats a hint of the same term.
	hint := &quoratev1.StatusResponse{NodeId: "n1", Nodes: nodes, Shards: []*quoratev1.ShardStatus{{Id: 0, LeaderId: "n2", Term: 3}}}
	self := &quoratev1.StatusResponse{NodeId: "n2", Nodes: nodes, Shards: []*quoratev1.ShardStatus{{Id: 0, LeaderId: "n2", Term: 3}}}
	other := &quoratev1.StatusResponse{NodeId: "n1", Nodes: nodes, Shards: []*quoratev1.ShardStatus{{Id: 0, LeaderId: "n1", Term: 3}}}
	if v := mergeStatus([]statusAnswer{{resp: hint}, {resp: other}}); v.leaders[0] != "n1" {
		t.Errorf("hint then self-report: leader %q, want n1", v.leaders[0])
	}
	if v := mergeStatus([]statusAnswer{{resp: other}, {resp: self}}); v.leaders[0] != "n1" {
		t.Errorf("two self-reports of a term: leader %q, want the first, n1", v.leaders[0])
	}
	// The node that answered is alive whatever gossip says of it.
	lone := &quoratev1.StatusResponse{NodeId: "n3", Nodes: nodes}
	if v := mergeStatus([]statusAnswer{{resp: lone}}); v.nodes["n3"] != "10.0.0.3:7403" || v.shards != 0 {
		t.Errorf("answer of n3 before bootstrap: %+v", v)
	}
	// Reported by n1 only, n2 is reached on n1's host.
	if v := mergeStatus([]statusAnswer{{via: "10.0.0.1:7401", resp: n1}}); v.nodes["n2"] != "10.0.0.1:7402" {
		t.Errorf("n2 reported by n1: at %q, want 10.0.0.1:7402", v.nodes["n2"])
	}
}

func TestParseRouting(t *testing.T) {
	for _, r := range []Routing{RouteLeader, RouteAny} {
		if got, err := ParseRouting(" " + r.String()); err != nil || got != r {
			t.Errorf("ParseRouting(%q) = %v, %v", r.String(), got, err)
		}
	}
	if _, err := ParseRouting("nearest"); !errors.Is(err, ErrUnknownRouting) {
		t.Errorf("ParseRouting(nearest): %v", err)
	}
}

func TestRetryable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection refused"), false},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), true},
		{status.Error(codes.Unavailable, `name resolver error: produced zero addresses; dial tcp: lookup x: no such host`), true},
		{status.Error(codes.Unavailable, "error reading from server: EOF"), false},
		{status.Error(codes.Unavailable, "transport is closing"), false},
		{status.Error(codes.Unavailable, "node is not part of a bootstrapped cluster yet"), false},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
		{status.Error(codes.Canceled, "context canceled"), false},
	} {
		if got := Retryable(tt.err); got != tt.want {
			t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}

	// gRPC's own errors: a node that is not listening...
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	_, err = dialFake(t, addr).Check(testContext(t), &quoratev1.CheckRequest{})
	if !Retryable(err) {
		t.Errorf("a call to a closed port: %v, want Retryable", err)
	}

	// ...and one that dies while it holds the request.
	f := &blockingNode{entered: make(chan struct{})}
	lis, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quoratev1.RegisterRateLimiterServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	c := dialFake(t, lis.Addr().String())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Check(testContext(t), &quoratev1.CheckRequest{})
		errc <- err
	}()
	<-f.entered
	srv.Stop() // closes the connection under the call
	if err := <-errc; Retryable(err) || err == nil {
		t.Errorf("a call cut off at the server: %v, want a non-retryable error", err)
	}
}

type blockingNode struct {
	quoratev1.UnimplementedRateLimiterServer
	entered chan struct{}
}

func (b *blockingNode) Check(ctx context.Context, _ *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	close(b.entered)
	<-ctx.Done()
	return nil, ctx.Err()
}

// routeNode is a fake cluster node: it answers Status with what the test
// says, and Check with one result per item, counting by mode the checks it
// got and, for strict ones, the shard of their first item.
type routeNode struct {
	quoratev1.UnimplementedRateLimiterServer
	quoratev1.UnimplementedAdminServer
	id   string
	addr string
	srv  *grpc.Server
	r    *ring.Ring

	mu     sync.Mutex
	status *quoratev1.StatusResponse
	hint   []string    // leader hint values to answer with
	multi  int         // strict checks of several items
	down   bool        // Status fails
	shards map[int]int // strict checks by shard of the first item
	leased int
}

func (n *routeNode) Check(ctx context.Context, req *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	resp := &quoratev1.CheckResponse{Decision: quoratev1.Decision_DECISION_ALLOW}
	for _, it := range req.GetItems() {
		s := n.r.ShardFor(ring.BucketKey(it.GetName(), it.GetKey()))
		resp.Results = append(resp.Results, &quoratev1.ItemResult{Decision: quoratev1.Decision_DECISION_ALLOW, Shard: int64(s)})
	}
	if req.GetMode() == quoratev1.Mode_MODE_LEASED {
		n.leased++
	} else if len(resp.Results) > 1 {
		n.multi++
	} else {
		n.shards[int(resp.Results[0].Shard)]++
	}
	if len(n.hint) > 0 {
		_ = grpc.SetHeader(ctx, metadata.MD{quoratev1.LeaderHintHeader: n.hint})
	}
	return resp, nil
}

func (n *routeNode) Status(context.Context, *quoratev1.StatusRequest) (*quoratev1.StatusResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, status.Error(codes.Internal, "status is down")
	}
	return n.status, nil
}

func (n *routeNode) counts() (shards map[int]int, leased int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return copyCounts(n.shards), n.leased
}

func copyCounts(m map[int]int) map[int]int {
	out := map[int]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// fakeCluster is n routeNodes on loopback whose Status says that shard s
// (of shards) is led by leader(s).
type fakeCluster struct {
	nodes []*routeNode
	r     *ring.Ring
}

func startFakeCluster(t *testing.T, n, shards int) *fakeCluster {
	t.Helper()
	r, _ := ring.New(shards)
	fc := &fakeCluster{r: r}
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &routeNode{id: fmt.Sprintf("n%d", i+1), addr: lis.Addr().String(), srv: grpc.NewServer(), r: r, shards: map[int]int{}}
		quoratev1.RegisterRateLimiterServer(nd.srv, nd)
		quoratev1.RegisterAdminServer(nd.srv, nd)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = nd.srv.Serve(lis)
		}()
		t.Cleanup(func() {
			nd.srv.Stop()
			<-done
		})
		fc.nodes = append(fc.nodes, nd)
	}
	fc.setLeaders(func(s int) int { return s % n }, fc.nodes)
	return fc
}

// setLeaders makes every node report that shard s is led by
// nodes[leader(s)], and that members are the cluster's live nodes.
func (fc *fakeCluster) setLeaders(leader func(s int) int, members []*routeNode) {
	var ns []*quoratev1.NodeStatus
	for _, m := range members {
		ns = append(ns, &quoratev1.NodeStatus{Id: m.id, RpcAddr: m.addr, State: quoratev1.NodeState_NODE_STATE_ALIVE})
	}
	for _, nd := range fc.nodes {
		st := &quoratev1.StatusResponse{NodeId: nd.id, Nodes: ns}
		for s := range fc.r.Shards() {
			st.Shards = append(st.Shards, &quoratev1.ShardStatus{Id: uint32(s), LeaderId: fc.nodes[leader(s)].id, Term: 1})
		}
		nd.mu.Lock()
		nd.status = st
		nd.mu.Unlock()
	}
}

func (fc *fakeCluster) setDown(down bool) {
	for _, nd := range fc.nodes {
		nd.mu.Lock()
		nd.down = down
		nd.mu.Unlock()
	}
}

func (fc *fakeCluster) addrs() []string {
	var out []string
	for _, n := range fc.nodes {
		out = append(out, n.addr)
	}
	return out
}

func dialCluster(t *testing.T, seeds []string, opts ...ClusterOption) *Cluster {
	t.Helper()
	c, err := DialCluster(testContext(t), seeds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClusterRoutesToLeaders: strict checks reach the node that leads
// their shard, multi-item ones the leader of most of their items; leased
// checks, and every check with RouteAny, spread over all nodes.
func TestClusterRoutesToLeaders(t *testing.T) {
	fc := startFakeCluster(t, 3, 8)
	c := dialCluster(t, fc.addrs()[:1]) // one seed is enough
	ctx := testContext(t)
	top := c.Topology()
	if top.Shards != 8 || len(top.Nodes) != 3 || top.Leaders[4] != "n2" {
		t.Fatalf("topology %+v", top)
	}
	for i := range 300 {
		if _, err := c.Check(ctx, &quoratev1.CheckRequest{Items: []*quoratev1.Item{item("api", fmt.Sprint("u", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	// Two items on shard 5 (n3) and one on shard 0 (n1): n3.
	items := []*quoratev1.Item{item("api", keyOn(t, fc.r, 0, 0)), item("api", keyOn(t, fc.r, 5, 0)), item("api", keyOn(t, fc.r, 5, 500))}
	for range 10 {
		if _, err := c.Check(ctx, &quoratev1.CheckRequest{Items: items}); err != nil {
			t.Fatal(err)
		}
	}
	for range 30 {
		if _, err := c.Check(ctx, &quoratev1.CheckRequest{Mode: quoratev1.Mode_MODE_LEASED, Items: items[:1]}); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for i, nd := range fc.nodes {
		shards, leased := nd.counts()
		for s, k := range shards {
			if s%3 != i {
				t.Errorf("%s got %d strict checks of shard %d, led by n%d", nd.id, k, s, s%3+1)
			}
			total += k
		}
		if leased != 10 {
			t.Errorf("%s got %d of 30 leased checks, want 10 (round-robin)", nd.id, leased)
		}
	}
	if total != 300 {
		t.Errorf("nodes got %d single-item strict checks, want 300", total)
	}
	for i, nd := range fc.nodes {
		nd.mu.Lock()
		if want := map[bool]int{true: 10}[i == 2]; nd.multi != want {
			t.Errorf("%s got %d of the 10 checks with one item on shard 0 (n1) and two on shard 5 (n3)", nd.id, nd.multi)
		}
		nd.mu.Unlock()
	}
	if st := c.Stats(); st.Unrouted != 0 || st.Retried != 0 || st.Hinted != 0 {
		t.Errorf("stats %+v", st)
	}

	// RouteAny spreads strict checks too.
	fc2 := startFakeCluster(t, 3, 8)
	spread := dialCluster(t, fc2.addrs(), WithRouting(RouteAny))
	for range 30 {
		if _, err := spread.Check(ctx, &quoratev1.CheckRequest{Items: items[:1]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, nd := range fc2.nodes {
		if shards, _ := nd.counts(); shards[0] != 10 {
			t.Errorf("RouteAny: %s got %d of 30 checks, want 10", nd.id, shards[0])
		}
	}
}

// TestClusterLeaderHint: a node that answers with a leader hint moves the
// shard's checks to the hinted node at once, without a refresh.
func TestClusterLeaderHint(t *testing.T) {
	fc := startFakeCluster(t, 3, 4)
	c := dialCluster(t, fc.addrs(), WithRefreshInterval(-1))
	ctx := testContext(t)
	req := &quoratev1.CheckRequest{Items: []*quoratev1.Item{item("api", keyOn(t, fc.r, 1, 0))}} // led by n2
	// n2 lost the lead to n3 and says so; Status fails, so only the hint
	// can tell.
	fc.nodes[1].mu.Lock()
	fc.nodes[1].hint = []string{quoratev1.FormatLeaderHint(1, "n3")}
	fc.nodes[1].mu.Unlock()
	fc.setDown(true)
	for range 5 {
		if _, err := c.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	s2, _ := fc.nodes[1].counts()
	s3, _ := fc.nodes[2].counts()
	if s2[1] != 1 || s3[1] != 4 {
		t.Errorf("n2 got %d, n3 %d of 5 checks; want 1 then 4 at the hinted leader", s2[1], s3[1])
	}
	if st := c.Stats(); st.Hinted != 1 {
		t.Errorf("stats %+v, want 1 hinted answer", st)
	}
	// A refresh believes the Status answers again (here stale on purpose):
	// routing follows the freshest information.
	fc.setDown(false)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if l := c.Topology().Leaders[1]; l != "n2" {
		t.Errorf("after a refresh shard 1's leader is %q, want n2 (as Status says)", l)
	}
	// A hint of no leader: the shard goes round-robin.
	c.learn([]string{quoratev1.FormatLeaderHint(1, ""), "garbage", quoratev1.FormatLeaderHint(99, "n1")})
	if l := c.Topology().Leaders[1]; l != "" {
		t.Errorf("after a no-leader hint shard 1's leader is %q", l)
	}
}

// TestClusterFailover: a node that is down is skipped, strict checks of
// its shards go to another node, and when every node is down the error is
// returned.
func TestClusterFailover(t *testing.T) {
	fc := startFakeCluster(t, 3, 3)
	c := dialCluster(t, fc.addrs(), WithRefreshInterval(-1))
	ctx := testContext(t)
	fc.nodes[0].srv.Stop() // n1 leads shard 0
	// A check sent before the client sees the connection close may have
	// reached n1: it fails, and is not retried. Wait until the client knows.
	c.mu.Lock()
	n1 := c.conns[fc.nodes[0].addr].c.Conn()
	c.mu.Unlock()
	for n1.GetState() == connectivity.Ready {
		n1.WaitForStateChange(ctx, connectivity.Ready)
	}
	req := &quoratev1.CheckRequest{Items: []*quoratev1.Item{item("api", keyOn(t, fc.r, 0, 0))}}
	for i := range 10 {
		if _, err := c.Check(ctx, req); err != nil {
			t.Fatalf("check %d with n1 down: %v", i, err)
		}
	}
	s2, _ := fc.nodes[1].counts()
	s3, _ := fc.nodes[2].counts()
	if s2[0]+s3[0] != 10 {
		t.Errorf("n2 and n3 got %d + %d of 10 checks", s2[0], s3[0])
	}
	if st := c.Stats(); st.Retried == 0 {
		t.Errorf("stats %+v: no retry", st)
	}
	fc.nodes[1].srv.Stop()
	fc.nodes[2].srv.Stop()
	_, err := c.Check(ctx, req)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("every node down: %v, want UNAVAILABLE", err)
	}
}

// TestClusterNodeLeaves: a node that leaves the cluster's status loses its
// connection at the next refresh, and no check goes to it.
func TestClusterNodeLeaves(t *testing.T) {
	fc := startFakeCluster(t, 3, 3)
	c := dialCluster(t, fc.addrs(), WithRefreshInterval(-1))
	ctx := testContext(t)
	if _, err := c.Check(ctx, &quoratev1.CheckRequest{Items: []*quoratev1.Item{item("api", keyOn(t, fc.r, 2, 0))}}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	gone := c.conns[fc.nodes[2].addr]
	c.mu.Unlock()
	fc.setLeaders(func(s int) int { return s % 2 }, fc.nodes[:2])
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if top := c.Topology(); len(top.Nodes) != 2 || top.Nodes["n3"] != "" || top.Leaders[2] != "n1" {
		t.Fatalf("topology %+v", top)
	}
	if s := gone.c.Conn().GetState(); s != connectivity.Shutdown {
		t.Errorf("n3's connection is %v, want closed", s)
	}
	for i := range 20 {
		if _, err := c.Check(ctx, &quoratev1.CheckRequest{Mode: quoratev1.Mode_MODE_LEASED, Items: []*quoratev1.Item{item("api", fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, leased := fc.nodes[2].counts(); leased != 0 {
		t.Errorf("n3 got %d leased checks after it left", leased)
	}
}

// TestClusterBackgroundRefresh: a leader change reaches the view within
// the refresh interval, with no traffic to trigger it.
func TestClusterBackgroundRefresh(t *testing.T) {
	fc := startFakeCluster(t, 3, 3)
	c := dialCluster(t, fc.addrs(), WithRefreshInterval(30*time.Millisecond))
	fc.setLeaders(func(s int) int { return (s + 1) % 3 }, fc.nodes)
	await.Until(t, 5*time.Second, func() error {
		if v := c.Topology(); v.Leaders[0] != "n2" {
			return fmt.Errorf("the view is %+v", v)
		}
		return nil
	})
}

func TestDialClusterNoSeed(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	_, err = DialCluster(testContext(t), []string{addr})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("DialCluster of a closed port: %v, want UNAVAILABLE", err)
	}
	if _, err := DialCluster(testContext(t), nil); err == nil {
		t.Error("DialCluster without seeds: no error")
	}
}

// TestClusterCheckAfterClose: a closed Cluster fails checks at once.
func TestClusterCheckAfterClose(t *testing.T) {
	fc := startFakeCluster(t, 3, 3)
	c := dialCluster(t, fc.addrs())
	c.Close()
	_, err := c.Check(testContext(t), &quoratev1.CheckRequest{Items: []*quoratev1.Item{item("api", "k")}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("check after Close: %v, want UNAVAILABLE", err)
	}
}

// After a split the nodes report the shards' ranges: the client routes by
// the newest record's (a node behind on it still routes the split's range
// to the shard that gave it away).
func TestMergeStatusRanges(t *testing.T) {
	shards := []*quoratev1.ShardStatus{{Id: 0}, {Id: 1}, {Id: 2}}
	old := &quoratev1.StatusResponse{NodeId: "n1", Epoch: 3, Shards: shards,
		Ranges: []*quoratev1.ShardRange{{Shard: 0, Lo: 0, Hi: 1<<63 - 1}, {Shard: 1, Lo: 1 << 63, Hi: math.MaxUint64}}}
	newer := &quoratev1.StatusResponse{NodeId: "n2", Epoch: 4, Shards: shards,
		Ranges: []*quoratev1.ShardRange{{Shard: 0, Lo: 0, Hi: 1<<63 - 1}, {Shard: 1, Lo: 1 << 63, Hi: 3<<62 - 1}, {Shard: 2, Lo: 3 << 62, Hi: math.MaxUint64}}}
	for _, answers := range [][]statusAnswer{{{resp: old}, {resp: newer}}, {{resp: newer}, {resp: old}}} {
		v := mergeStatus(answers)
		if v.shards != 3 || len(v.bounds) != 3 || v.bounds[2] != (ring.Bound{Lo: 3 << 62, Shard: 2}) {
			t.Fatalf("view: %d shards, bounds %v; want epoch 4's three", v.shards, v.bounds)
		}
		r, err := ring.NewSplit(v.shards, v.bounds)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.ShardForHash(math.MaxUint64); got != 2 {
			t.Errorf("the top hash routes to %d, want the split's child 2", got)
		}
	}
	if v := mergeStatus([]statusAnswer{{resp: &quoratev1.StatusResponse{NodeId: "n1", Shards: shards}}}); v.bounds != nil {
		t.Errorf("no ranges reported, bounds %v: want the uniform ring", v.bounds)
	}
}

// TestLocalFailModes: with no node reachable, a Cluster made with
// WithLocalFailModes answers inline items by their fail modes; without
// it, and for descriptor checks, Check fails.
func TestLocalFailModes(t *testing.T) {
	fc := startFakeCluster(t, 2, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	local, err := DialCluster(ctx, fc.addrs(), WithLocalFailModes(), WithRefreshInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	plain, err := DialCluster(ctx, fc.addrs(), WithRefreshInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, nd := range fc.nodes {
		nd.srv.Stop()
	}
	open, closed := item("api", "a"), item("api", "b")
	// A connection that breaks mid-call is not proof that a check was not
	// applied; wait until both clients find every node refusing them.
	desc := &quoratev1.CheckRequest{Descriptors: &quoratev1.Descriptors{TenantId: "t"}}
	await.True(t, 10*time.Second, "every node refuses connections", func() bool {
		_, errLocal := local.Check(ctx, desc)
		_, errPlain := plain.Check(ctx, desc)
		return Retryable(errLocal) && Retryable(errPlain)
	})
	closed.Fail = quoratev1.FailMode_FAIL_MODE_CLOSED
	resp, err := local.Check(ctx, &quoratev1.CheckRequest{Items: []*quoratev1.Item{open}})
	if err != nil || resp.GetDecision() != quoratev1.Decision_DECISION_ALLOW || resp.GetResults()[0].GetReason() != quoratev1.Reason_REASON_FAIL_OPEN {
		t.Errorf("open item, cluster gone: %v %v; want ALLOW FAIL_OPEN", resp, err)
	}
	resp, err = local.Check(ctx, &quoratev1.CheckRequest{Items: []*quoratev1.Item{open, closed}})
	if err != nil || resp.GetDecision() != quoratev1.Decision_DECISION_DENY || resp.GetResults()[1].GetReason() != quoratev1.Reason_REASON_UNAVAILABLE {
		t.Errorf("a closed item, cluster gone: %v %v; want DENY UNAVAILABLE", resp, err)
	}
	if n := local.Stats().FailedLocally; n != 2 {
		t.Errorf("FailedLocally %d, want 2", n)
	}
	if _, err := local.Check(ctx, desc); status.Code(err) != codes.Unavailable {
		t.Errorf("descriptor check, cluster gone: %v; want UNAVAILABLE (the policies' fail modes are not known here)", err)
	}
	if _, err := plain.Check(ctx, &quoratev1.CheckRequest{Items: []*quoratev1.Item{open}}); status.Code(err) != codes.Unavailable {
		t.Errorf("without WithLocalFailModes: %v; want UNAVAILABLE", err)
	}
}
