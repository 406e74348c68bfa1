package quoratedriver

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/bench"
	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// node is a fake cluster node of a one-shard cluster led by "n2".
type node struct {
	pb.UnimplementedRateLimiterServer
	pb.UnimplementedAdminServer
	id     string
	status func() *pb.StatusResponse
	checks atomic.Int64
}

func (n *node) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	n.checks.Add(1)
	resp := &pb.CheckResponse{Decision: pb.Decision_DECISION_ALLOW}
	for range req.GetItems() {
		resp.Results = append(resp.Results, &pb.ItemResult{Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT, Index: 1})
	}
	return resp, nil
}

func (n *node) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	st := n.status()
	st.NodeId = n.id
	return st, nil
}

func TestNewRouted(t *testing.T) {
	var nodes []*node
	var addrs []string
	status := func() *pb.StatusResponse {
		st := &pb.StatusResponse{Shards: []*pb.ShardStatus{{Id: 0, LeaderId: "n2", Term: 1}}}
		for i, n := range nodes {
			st.Nodes = append(st.Nodes, &pb.NodeStatus{Id: n.id, RpcAddr: addrs[i], State: pb.NodeState_NODE_STATE_ALIVE})
		}
		return st
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		n := &node{id: id, status: status}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		pb.RegisterRateLimiterServer(g, n)
		pb.RegisterAdminServer(g, n)
		go func() { _ = g.Serve(l) }()
		t.Cleanup(g.Stop)
		nodes, addrs = append(nodes, n), append(addrs, l.Addr().String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := &bench.Limit{Algorithm: "token_bucket", Limit: 5, Period: time.Minute}
	items := []bench.Item{{Name: "n", Key: "a", Limit: l, Cost: 1}}
	out := make([]bench.Outcome, 1)
	run := func(mode, route string) []int64 {
		t.Helper()
		for _, n := range nodes {
			n.checks.Store(0)
		}
		d, err := NewRouted(ctx, addrs, Options{Mode: mode}, route)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		for range 9 {
			if err := d.Check(ctx, items, out); err != nil {
				t.Fatal(err)
			}
		}
		return []int64{nodes[0].checks.Load(), nodes[1].checks.Load(), nodes[2].checks.Load()}
	}
	for _, tt := range []struct {
		mode, route string
		want        [3]int64
	}{
		{"strict", RouteLeader, [3]int64{0, 9, 0}},
		{"strict", RouteAny, [3]int64{3, 3, 3}},
		{"leased", RouteLeader, [3]int64{3, 3, 3}}, // leased checks are not routed
	} {
		if got := run(tt.mode, tt.route); [3]int64(got) != tt.want {
			t.Errorf("%s, route %s: checks per node %v, want %v", tt.mode, tt.route, got, tt.want)
		}
	}
	if _, err := NewRouted(ctx, addrs, Options{Mode: "strict"}, "nearest"); !errors.Is(err, client.ErrUnknownRouting) {
		t.Errorf("route nearest: %v", err)
	}
}
