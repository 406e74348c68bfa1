package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// fakeTenantAdmin is a node's tenant side: it keeps the assignment it is
// sent, at a version, and refuses the refuseChunk-th SetTenants (from 1);
// the unknownChunk-th answers Unavailable once.
type fakeTenantAdmin struct {
	pb.UnimplementedRateLimiterServer
	pb.UnimplementedAdminServer

	mu                        sync.Mutex
	plans                     map[string]string
	version                   uint64
	calls                     []int
	refuseChunk, unknownChunk int
	addr                      string
	// nodes is what Status lists (nil: this node alone); notFound is how
	// many GetTenant calls answer NotFound before the tenants are known.
	nodes    []*pb.NodeStatus
	notFound int
}

func (f *fakeTenantAdmin) SetTenants(_ context.Context, req *pb.SetTenantsRequest) (*pb.SetTenantsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, len(req.GetAssignments()))
	n := len(f.calls)
	if n == f.unknownChunk {
		f.unknownChunk = -1
		f.calls = f.calls[:n-1]
		return nil, status.Error(codes.Unavailable, "the meta group has no leader")
	}
	if n == f.refuseChunk {
		return nil, status.Error(codes.InvalidArgument, "the assignment would hold 10000001 tenants, more than the cluster's maximum of 10000000")
	}
	resp := &pb.SetTenantsResponse{}
	for _, a := range req.GetAssignments() {
		if f.plans[a.GetTenantId()] == a.GetPlan() {
			resp.Unchanged++
			continue
		}
		f.plans[a.GetTenantId()] = a.GetPlan()
		resp.Set++
	}
	if resp.Set > 0 {
		f.version++
	}
	resp.Version, resp.Tenants = f.version, uint64(len(f.plans))
	return resp, nil
}

func (f *fakeTenantAdmin) GetTenant(_ context.Context, req *pb.GetTenantRequest) (*pb.GetTenantResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.plans[req.GetTenantId()]
	if f.notFound > 0 {
		f.notFound--
		ok = false
	}
	if !ok {
		return nil, status.Errorf(codes.NotFound, "tenant %q has no plan assigned", req.GetTenantId())
	}
	tier := map[string]string{"plan_pro": "PRO"}[p]
	if tier == "" {
		tier = p
	}
	return &pb.GetTenantResponse{TenantId: req.GetTenantId(), Plan: p, Tier: tier, Version: f.version}, nil
}

func (f *fakeTenantAdmin) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodes != nil {
		return &pb.StatusResponse{NodeId: "n1", Nodes: f.nodes}, nil
	}
	return &pb.StatusResponse{NodeId: "n1", Nodes: []*pb.NodeStatus{{Id: "n1", RpcAddr: f.addr, State: pb.NodeState_NODE_STATE_ALIVE}}}, nil
}

func startTenantNode(t *testing.T, f *fakeTenantAdmin) string {
	f.plans = map[string]string{}
	f.addr = startFakeNode(t, f)
	return f.addr
}

// TestTenantSetGet: set says what it did and waits until the node answers
// with the new version; get shows the tier a policy id means.
func TestTenantSetGet(t *testing.T) {
	f := &fakeTenantAdmin{}
	addr := startTenantNode(t, f)
	r := runCLI(t, "tenant", "set", "t_1", "--plan", "plan_pro", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"t_1: now on plan plan_pro (assignment version 1, 1 tenants)\n", "live on n1 after "}, nil)
	r = runCLI(t, "tenant", "set", "t_1", "--plan", "plan_pro", "--plaintext", "--addr", addr, "--wait=false")
	expectRun(t, r, 0, []string{"t_1: already on plan plan_pro (assignment version 1, 1 tenants)\n"}, nil)
	r = runCLI(t, "tenant", "get", "t_1", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"t_1: plan plan_pro (tier PRO), assignment version 1\n"}, nil)
	r = runCLI(t, "tenant", "get", "t_1", "--plaintext", "--addr", addr, "-o", "json")
	expectRun(t, r, 0, []string{`{"tenant_id":"t_1","plan":"plan_pro","tier":"PRO","version":1}` + "\n"}, nil)
	r = runCLI(t, "tenant", "get", "t_9", "--plaintext", "--addr", addr)
	expectRun(t, r, 1, nil, []string{`NotFound: tenant "t_9" has no plan assigned`})
	r = runCLI(t, "tenant", "set", "t_1", "--plaintext", "--addr", addr)
	expectRun(t, r, 2, nil, []string{`required flag(s) "plan" not set`})
}

// tenantNodes starts three fake nodes; the first lists them all, and a
// dead fourth that no wait may ask.
func tenantNodes(t *testing.T) []*fakeTenantAdmin {
	fs := []*fakeTenantAdmin{{}, {}, {}}
	var nodes []*pb.NodeStatus
	for i, f := range fs {
		nodes = append(nodes, &pb.NodeStatus{Id: fmt.Sprintf("n%d", i+1), RpcAddr: startTenantNode(t, f), State: pb.NodeState_NODE_STATE_ALIVE})
	}
	nodes = append(nodes, &pb.NodeStatus{Id: "n4", RpcAddr: "127.0.0.1:1", State: pb.NodeState_NODE_STATE_DEAD})
	fs[0].mu.Lock()
	fs[0].nodes = nodes
	fs[0].mu.Unlock()
	return fs
}

// TestTenantSetWaitNodes: --wait asks every live node for the tenant; one
// that does not know it yet is behind, not failing, and is waited for.
func TestTenantSetWaitNodes(t *testing.T) {
	fs := tenantNodes(t)
	fs[1].mu.Lock()
	fs[1].plans["t_1"], fs[1].version, fs[1].notFound = "PRO", 1, 3
	fs[1].mu.Unlock()
	fs[2].mu.Lock()
	fs[2].plans["t_1"], fs[2].version = "PRO", 2 // already past it
	fs[2].mu.Unlock()
	r := runCLI(t, "tenant", "set", "t_1", "--plan", "PRO", "--plaintext", "--addr", fs[0].addr)
	expectRun(t, r, 0, []string{"live on n1 after ", ", n2 after ", ", n3 after "}, nil)
	fs[1].mu.Lock()
	defer fs[1].mu.Unlock()
	if fs[1].notFound != 0 {
		t.Errorf("n2 was not asked again after NotFound (%d left)", fs[1].notFound)
	}
}

// TestTenantSetWaitTimesOut: the nodes not there are named in the nodes'
// order, one that never knew the tenant as giving no answer.
func TestTenantSetWaitTimesOut(t *testing.T) {
	fs := tenantNodes(t)
	fs[2].mu.Lock()
	fs[2].plans["t_1"] = "PRO" // at version 0
	fs[2].mu.Unlock()
	start := time.Now()
	r := runCLI(t, "tenant", "set", "t_1", "--plan", "PRO", "--plaintext", "--addr", fs[0].addr, "--wait-timeout", "300ms")
	expectRun(t, r, 1, []string{"live on n1 after "}, []string{"quorate: --wait-timeout 300ms: assignment version 1 not live on [n2 (no answer) n3 (at version 0)]"})
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("gave up after %v", el)
	}
	if strings.Contains(r.stdout+r.stderr, "n4") {
		t.Errorf("waited for the dead n4:\n%s\n%s", r.stdout, r.stderr)
	}
	r = runCLI(t, "tenant", "set", "t_2", "--plan", "PRO", "--plaintext", "--addr", fs[0].addr, "--wait-timeout", "0s")
	expectRun(t, r, 2, []string{"t_2: now on plan PRO"}, []string{"--wait-timeout 0s: must be positive"})
}

func csvFile(n, bad int) string {
	var b strings.Builder
	b.WriteString("tenant_id,plan\n")
	for i := 1; i <= n; i++ {
		plan := []string{"FREE", "PRO"}[i%2]
		if i == bad {
			plan = ""
		}
		fmt.Fprintf(&b, "t_%d,%s\n", i, plan)
	}
	return b.String()
}

// TestTenantImport: a file is checked whole first (a bad line: nothing
// sent), then sent in chunks in order; an unknown outcome is sent again; a
// refused chunk stops the import naming the lines imported; importing
// again changes nothing.
func TestTenantImport(t *testing.T) {
	f := &fakeTenantAdmin{unknownChunk: 2}
	addr := startTenantNode(t, f)
	file := writeFile(t, "tenants.csv", csvFile(12_000, 0))
	r := runCLI(t, "tenant", "import", file, "--plaintext", "--addr", addr, "--chunk", "5000")
	expectRun(t, r, 0, []string{"imported 12000 assignments from " + file + " in 3 chunks: 12000 set, 0 unchanged; assignment version 3, 12000 tenants",
		"1 chunks were sent again after an unknown outcome", "live on n1 after"}, nil)
	if fmt.Sprint(f.calls) != "[5000 5000 2000]" {
		t.Errorf("chunks sent: %v", f.calls)
	}
	r = runCLI(t, "tenant", "import", file, "--plaintext", "--addr", addr, "--wait=false")
	expectRun(t, r, 0, []string{"0 set, 12000 unchanged; assignment version 3"}, nil)

	bad := writeFile(t, "bad.csv", csvFile(10, 7)+"t_x,PRO,extra\n")
	f.calls = nil
	r = runCLI(t, "tenant", "import", bad, "--plaintext", "--addr", addr)
	expectRun(t, r, 1, nil, []string{bad + ":8: tenants: plan: required\n", bad + ":12: 3 fields, want 2: tenant_id,plan\n", "lines refused (above); nothing was imported"})
	if len(f.calls) != 0 {
		t.Errorf("a file with bad lines sent %v", f.calls)
	}
	r = runCLI(t, "tenant", "import", file, "--dry-run", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"12000 assignments on 12001 lines, all valid; dry run: nothing sent"}, nil)

	g := &fakeTenantAdmin{refuseChunk: 2}
	addr = startTenantNode(t, g)
	r = runCLI(t, "tenant", "import", file, "--plaintext", "--addr", addr, "--chunk", "4000")
	expectRun(t, r, 1, nil, []string{"chunk 2 (lines 4002..8001) refused: InvalidArgument: the assignment would hold 10000001 tenants", "lines 1..4001 were imported, none after"})
	r = runCLI(t, "tenant", "import", file, "--plaintext", "--addr", addr, "--chunk", "5001")
	expectRun(t, r, 2, nil, []string{"--chunk 5001: must be between 1 and 5000"})
}
