package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// TestMain fails the package if a test leaves a gRPC server or connection
// goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeNode stands in for a quorate node: it records the last CheckRequest
// and answers with canned responses. The cluster's own tests cover the real
// server; this one only proves the client's wiring.
type fakeNode struct {
	quoratev1.UnimplementedRateLimiterServer
	quoratev1.UnimplementedAdminServer

	mu struct {
		sync.Mutex
		last *quoratev1.CheckRequest // guarded by mu
	}
	check  *quoratev1.CheckResponse
	status *quoratev1.StatusResponse
	leave  error // Leave fails with it, else answers epoch 17
}

func (f *fakeNode) Check(_ context.Context, req *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	f.mu.Lock()
	f.mu.last = req
	f.mu.Unlock()
	if len(req.GetItems()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "items: at least one item is required")
	}
	return f.check, nil
}

func (f *fakeNode) Status(context.Context, *quoratev1.StatusRequest) (*quoratev1.StatusResponse, error) {
	return f.status, nil
}

func (f *fakeNode) Leave(context.Context, *quoratev1.LeaveRequest) (*quoratev1.LeaveResponse, error) {
	if f.leave != nil {
		return nil, f.leave
	}
	return &quoratev1.LeaveResponse{Epoch: 17}, nil
}

func (f *fakeNode) lastCheck() *quoratev1.CheckRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.last
}

// startFake serves f and a health service on 127.0.0.1:0 until the test ends.
func startFake(t *testing.T, f *fakeNode) (addr string, hs *health.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quoratev1.RegisterRateLimiterServer(srv, f)
	quoratev1.RegisterAdminServer(srv, f)
	hs = health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String(), hs
}

func dialFake(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCheckRoundTrip(t *testing.T) {
	f := &fakeNode{check: &quoratev1.CheckResponse{
		Decision: quoratev1.Decision_DECISION_DENY,
		Results: []*quoratev1.ItemResult{{
			Decision:   quoratev1.Decision_DECISION_DENY,
			Reason:     quoratev1.Reason_REASON_OVER_LIMIT,
			Limit:      100,
			Remaining:  0,
			ResetAfter: durationpb.New(600 * time.Millisecond),
			RetryAfter: durationpb.New(550 * time.Millisecond),
			Shard:      7,
			Index:      1234,
		}},
	}}
	addr, _ := startFake(t, f)
	c := dialFake(t, addr)
	ctx := testContext(t)

	req := &quoratev1.CheckRequest{
		RequestId: "r-1",
		Mode:      quoratev1.Mode_MODE_LEASED,
		Items: []*quoratev1.Item{{
			Name:           "api",
			Key:            "user:42",
			Algorithm:      quoratev1.Algorithm_ALGORITHM_GCRA,
			Limit:          100,
			Period:         durationpb.New(time.Minute),
			Burst:          10,
			Cost:           2,
			Fail:           quoratev1.FailMode_FAIL_MODE_CLOSED,
			IdempotencyKey: "idem",
		}},
	}
	resp, err := c.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !proto.Equal(resp, f.check) {
		t.Errorf("Check response = %v; want %v", resp, f.check)
	}
	if got := f.lastCheck(); !proto.Equal(got, req) {
		t.Errorf("server got %v; want %v", got, req)
	}
}

func TestCheckKeepsStatusCode(t *testing.T) {
	addr, _ := startFake(t, &fakeNode{})
	c := dialFake(t, addr)

	_, err := c.Check(testContext(t), &quoratev1.CheckRequest{})
	if got := status.Code(err); got != codes.InvalidArgument {
		t.Fatalf("status.Code(%v) = %v; want InvalidArgument", err, got)
	}
	if msg := status.Convert(err).Message(); msg != "items: at least one item is required" {
		t.Errorf("message = %q", msg)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	f := &fakeNode{status: &quoratev1.StatusResponse{
		NodeId: "n1",
		Nodes: []*quoratev1.NodeStatus{
			{Id: "n1", RpcAddr: "127.0.0.1:7401", State: quoratev1.NodeState_NODE_STATE_ALIVE},
			{Id: "n2", RpcAddr: "127.0.0.1:7402", State: quoratev1.NodeState_NODE_STATE_SUSPECT},
		},
		Shards: []*quoratev1.ShardStatus{{
			Id:           3,
			LeaderId:     "n2",
			Replicas:     []string{"n1", "n2", "n3"},
			Term:         4,
			AppliedIndex: 99,
			LastContact:  timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		}},
	}}
	addr, _ := startFake(t, f)
	c := dialFake(t, addr)

	got, err := c.Status(testContext(t))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if !proto.Equal(got, f.status) {
		t.Errorf("Status = %v; want %v", got, f.status)
	}
}

func TestLeaveRoundTrip(t *testing.T) {
	addr, _ := startFake(t, &fakeNode{})
	resp, err := dialFake(t, addr).Leave(testContext(t))
	if err != nil || resp.GetEpoch() != 17 {
		t.Fatalf("Leave = %v, %v; want epoch 17", resp, err)
	}

	addr, _ = startFake(t, &fakeNode{leave: status.Error(codes.FailedPrecondition, "leave: 2 nodes would remain")})
	_, err = dialFake(t, addr).Leave(testContext(t))
	if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "leave: 2 nodes would remain" {
		t.Errorf("Leave = %v; want FailedPrecondition, as sent", err)
	}
}

func TestHealth(t *testing.T) {
	addr, hs := startFake(t, &fakeNode{})
	c := dialFake(t, addr)
	ctx := testContext(t)

	if err := c.Health(ctx); err != nil {
		t.Errorf("Health while SERVING = %v; want nil", err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := c.Health(ctx); !errors.Is(err, ErrNotServing) {
		t.Errorf("Health while NOT_SERVING = %v; want ErrNotServing", err)
	}
	hs.Shutdown()
	if err := c.Health(ctx); !errors.Is(err, ErrNotServing) {
		t.Errorf("Health after Shutdown = %v; want ErrNotServing", err)
	}
}

func TestUnreachableNode(t *testing.T) {
	// A port that was just free: Dial succeeds (it does not connect), the
	// first call fails with UNAVAILABLE.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	c := dialFake(t, addr)
	if c.Conn() == nil {
		t.Fatal("Conn() = nil")
	}
	if err := c.Health(testContext(t)); status.Code(err) != codes.Unavailable {
		t.Errorf("Health on a closed port = %v; want Unavailable", err)
	}
}
