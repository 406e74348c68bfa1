package main

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// routeFakeNode is a node of a fake one-shard cluster led by n2: it
// answers Admin.Status so that a routed client can learn that, and allows
// every check.
type routeFakeNode struct {
	pb.UnimplementedRateLimiterServer
	pb.UnimplementedAdminServer
	id     string
	nodes  *[]*pb.NodeStatus
	checks atomic.Int64
}

func (n *routeFakeNode) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	n.checks.Add(1)
	resp := &pb.CheckResponse{Decision: pb.Decision_DECISION_ALLOW}
	for range req.GetItems() {
		resp.Results = append(resp.Results, &pb.ItemResult{Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT,
			Index: 1, DecidedAtUnixNano: time.Now().UnixNano()})
	}
	return resp, nil
}

func (n *routeFakeNode) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{NodeId: n.id, Nodes: *n.nodes, Shards: []*pb.ShardStatus{{Id: 0, LeaderId: "n2", Term: 1}}}, nil
}

// startRouteFakes serves three routeFakeNodes and returns their addresses.
func startRouteFakes(t *testing.T) ([]string, []*routeFakeNode) {
	t.Helper()
	var nodes []*pb.NodeStatus
	var addrs []string
	var fakes []*routeFakeNode
	for _, id := range []string{"n1", "n2", "n3"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &routeFakeNode{id: id, nodes: &nodes}
		srv := grpc.NewServer()
		pb.RegisterRateLimiterServer(srv, f)
		pb.RegisterAdminServer(srv, f)
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(srv.Stop)
		nodes = append(nodes, &pb.NodeStatus{Id: id, RpcAddr: l.Addr().String(), State: pb.NodeState_NODE_STATE_ALIVE})
		addrs, fakes = append(addrs, l.Addr().String()), append(fakes, f)
	}
	return addrs, fakes
}

func counts(fakes []*routeFakeNode) [3]int64 {
	var out [3]int64
	for i, f := range fakes {
		out[i] = f.checks.Swap(0)
	}
	return out
}

// TestBenchRoute: strict checks go to the shard's leader by default, and
// round-robin with --route any.
func TestBenchRoute(t *testing.T) {
	addrs, fakes := startRouteFakes(t)
	list := addrs[0] + "," + addrs[1] + "," + addrs[2]
	for _, tt := range []struct {
		args []string
		want [3]int64
	}{
		{nil, [3]int64{0, 90, 0}},
		{[]string{"--route", "any"}, [3]int64{30, 30, 30}},
		{[]string{"--route", "leader", "--mode", "leased"}, [3]int64{30, 30, 30}},
	} {
		args := append([]string{"bench", "--plaintext", "--addrs", list, "--requests", "90", "--concurrency", "1", "--warmup", "0s", "--quiet"}, tt.args...)
		if r := runCLI(t, args...); r.code != exitOK {
			t.Fatalf("%v: exit %d\n%s", tt.args, r.code, r.stderr)
		}
		if got := counts(fakes); got != tt.want {
			t.Errorf("%v: checks per node %v, want %v", tt.args, got, tt.want)
		}
	}
}

// TestCheckRoute: with several --addr, "quorate check" goes to the leader
// of the item's shard; with --route any, to the first node it can reach.
func TestCheckRoute(t *testing.T) {
	addrs, fakes := startRouteFakes(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	base := []string{"check", "--plaintext", "--name", "api", "--key", "k", "--limit", "5", "--period", "1s"}
	for _, tt := range []struct {
		args []string
		want [3]int64
	}{
		{[]string{"--addr", addrs[0] + "," + addrs[2]}, [3]int64{0, 1, 0}},
		{[]string{"--addr", addrs[0], "--route", "leader"}, [3]int64{0, 1, 0}},
		{[]string{"--addr", addrs[0], "--addr", addrs[1], "--route", "any"}, [3]int64{1, 0, 0}},
		{[]string{"--addr", dead + "," + addrs[2], "--route", "any"}, [3]int64{0, 0, 1}},
		{[]string{"--addr", dead + "," + addrs[2]}, [3]int64{0, 1, 0}},
	} {
		r := runCLI(t, append(append([]string(nil), base...), tt.args...)...)
		if r.code != exitOK {
			t.Fatalf("%v: exit %d\n%s", tt.args, r.code, r.stderr)
		}
		if got := counts(fakes); got != tt.want {
			t.Errorf("%v: checks per node %v, want %v", tt.args, got, tt.want)
		}
	}
	if r := runCLI(t, append(base, "--route", "nearest")...); r.code != exitUsage || !strings.Contains(r.stderr, "--route") {
		t.Errorf("--route nearest: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, append(base, "--addr", dead+","+dead)...); r.code != exitUsage || !strings.Contains(r.stderr, "Unavailable") {
		t.Errorf("no node up: exit %d, stderr %q", r.code, r.stderr)
	}
}
