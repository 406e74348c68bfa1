package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/api"
	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/rpc/quoratev1"
)

func TestCheckExitCode(t *testing.T) {
	tests := []struct {
		name string
		resp *quoratev1.CheckResponse
		err  error
		want int
	}{
		{"allowed", &quoratev1.CheckResponse{Decision: quoratev1.Decision_DECISION_ALLOW}, nil, 0},
		{"denied", &quoratev1.CheckResponse{Decision: quoratev1.Decision_DECISION_DENY}, nil, 1},
		{"no decision", &quoratev1.CheckResponse{}, nil, 2},
		{"unknown decision", &quoratev1.CheckResponse{Decision: 9}, nil, 2},
		{"nil response", nil, nil, 2},
		{"invalid argument", nil, status.Error(codes.InvalidArgument, "items[0].key: empty"), 2},
		{"unavailable", nil, status.Error(codes.Unavailable, "connection refused"), 2},
		// An error wins over whatever came with it.
		{"error and allow", &quoratev1.CheckResponse{Decision: quoratev1.Decision_DECISION_ALLOW}, errors.New("boom"), 2},
	}
	for _, tt := range tests {
		if got := checkExitCode(tt.resp, tt.err); got != tt.want {
			t.Errorf("%s: checkExitCode = %d; want %d", tt.name, got, tt.want)
		}
	}
}

// fakeLimiter answers by key: "allow", "deny", "bad" (INVALID_ARGUMENT) or
// anything else (a response without a decision).
type fakeLimiter struct {
	quoratev1.UnimplementedRateLimiterServer
	quoratev1.UnimplementedAdminServer

	mu    sync.Mutex
	last  *quoratev1.CheckRequest // guarded by mu
	nodes []*quoratev1.NodeStatus // Status's nodes, if set; guarded by mu
}

func (f *fakeLimiter) Check(_ context.Context, req *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	f.mu.Lock()
	f.last = req
	f.mu.Unlock()
	result := &quoratev1.ItemResult{
		Limit:      req.Items[0].Limit,
		ResetAfter: durationpb.New(600 * time.Millisecond),
		Shard:      7,
		Index:      1234,
		Algorithm:  req.Items[0].Algorithm,
	}
	switch req.Items[0].Key {
	case "allow":
		result.Decision, result.Reason, result.Remaining = quoratev1.Decision_DECISION_ALLOW, quoratev1.Reason_REASON_WITHIN_LIMIT, 99
	case "deny":
		result.Decision, result.Reason = quoratev1.Decision_DECISION_DENY, quoratev1.Reason_REASON_OVER_LIMIT
		result.RetryAfter = durationpb.New(550 * time.Millisecond)
	case "bad":
		return nil, status.Error(codes.InvalidArgument, "items[0].key: key \"bad\" is bad")
	default:
		return &quoratev1.CheckResponse{}, nil
	}
	return &quoratev1.CheckResponse{Decision: result.Decision, Reason: result.Reason, Results: []*quoratev1.ItemResult{result}}, nil
}

func (f *fakeLimiter) Status(context.Context, *quoratev1.StatusRequest) (*quoratev1.StatusResponse, error) {
	f.mu.Lock()
	nodes := f.nodes
	f.mu.Unlock()
	if nodes == nil {
		nodes = []*quoratev1.NodeStatus{{Id: "n1", RpcAddr: "127.0.0.1:7401", State: quoratev1.NodeState_NODE_STATE_ALIVE}}
	}
	return &quoratev1.StatusResponse{
		NodeId: "n1",
		Nodes:  nodes,
		Shards: []*quoratev1.ShardStatus{{Id: 0, LeaderId: "n1", Replicas: []string{"n1"}, Term: 2, AppliedIndex: 10, LastContact: timestamppb.Now()}},
	}, nil
}

func (f *fakeLimiter) lastRequest() *quoratev1.CheckRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// fakeServer is a fake node's services.
type fakeServer interface {
	quoratev1.RateLimiterServer
	quoratev1.AdminServer
}

// startFakeNode serves f on 127.0.0.1:0 until the test ends.
func startFakeNode(t *testing.T, f fakeServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quoratev1.RegisterRateLimiterServer(srv, f)
	quoratev1.RegisterAdminServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

func TestCheckCommand(t *testing.T) {
	f := &fakeLimiter{}
	addr := startFakeNode(t, f)
	base := []string{"check", "--plaintext", "--addr", addr, "--name", "api", "--limit", "100", "--period", "1m"}

	tests := []struct {
		name string
		args []string
		code int
		// out and errOut must be in stdout and stderr.
		out, errOut []string
	}{
		{
			name: "allowed",
			args: []string{"--key", "allow"},
			code: 0,
			out:  []string{"decision     ALLOW", "reason       WITHIN_LIMIT", "limit        100", "remaining    99", "reset after  600ms", "retry after  0s", "shard        7", "index        1234"},
		},
		{
			name: "denied",
			args: []string{"--key", "deny"},
			code: 1,
			out:  []string{"decision     DENY", "reason       TOKEN_BUCKET_EMPTY", "retry after  550ms"},
		},
		{
			name:   "server error",
			args:   []string{"--key", "bad"},
			code:   2,
			errOut: []string{`quorate: InvalidArgument: items[0].key: key "bad" is bad`},
		},
		{
			name:   "no decision",
			args:   []string{"--key", "odd"},
			code:   2,
			errOut: []string{"no decision"},
		},
		{
			name:   "bad algorithm",
			args:   []string{"--key", "allow", "--algorithm", "leaky"},
			code:   2,
			errOut: []string{"--algorithm: client: unknown algorithm \"leaky\" (want one of token_bucket, gcra,", "quorate check --help"},
		},
		{
			name:   "bad mode",
			args:   []string{"--key", "allow", "--mode", "fast"},
			code:   2,
			errOut: []string{"--mode: client: unknown mode \"fast\" (want strict or leased)"},
		},
		{
			name:   "bad fail mode",
			args:   []string{"--key", "allow", "--fail", "shut"},
			code:   2,
			errOut: []string{"--fail: client: unknown fail mode \"shut\" (want open or closed)"},
		},
		{
			name:   "missing key",
			args:   nil,
			code:   2,
			errOut: []string{`required flag(s) "key" not set`},
		},
		{
			name:   "bad period",
			args:   []string{"--key", "allow", "--period", "60"},
			code:   2,
			errOut: []string{`"--period"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, append(append([]string(nil), base...), tt.args...)...)
			if r.code != tt.code {
				t.Errorf("exit %d; want %d (stderr %q)", r.code, tt.code, r.stderr)
			}
			for _, s := range tt.out {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout does not contain %q:\n%s", s, r.stdout)
				}
			}
			for _, s := range tt.errOut {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not contain %q:\n%s", s, r.stderr)
				}
			}
		})
	}
}

// TestCheckCommandJSON: --json prints plain JSON in the decision API's
// names, numbers as numbers and enums spelt as that API spells them.
func TestCheckCommandJSON(t *testing.T) {
	addr := startFakeNode(t, &fakeLimiter{})
	r := runCLI(t, "check", "--plaintext", "--addr", addr, "--name", "api", "--key", "deny", "--limit", "100", "--period", "1m",
		"--request-id", "r1", "--json")
	if r.code != 1 {
		t.Fatalf("exit %d; want 1 (stderr %q)", r.code, r.stderr)
	}
	var got cliview.ItemCheckJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
	}
	want := cliview.ItemCheckJSON{RequestID: "r1", Decision: "DENY", Reason: "TOKEN_BUCKET_EMPTY", Items: []cliview.ItemJSON{{
		Decision: "DENY", Reason: "TOKEN_BUCKET_EMPTY", Algorithm: "TOKEN_BUCKET", Limit: 100,
		ResetAfterMs: 600, RetryAfterMs: 550, Shard: 7, Index: 1234,
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v\nwant %+v", got, want)
	}
	for _, s := range []string{`"limit": 100,`, `"remaining": 0,`, `"delay_ms": 0,`} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %s (numbers as numbers, zeros printed):\n%s", s, r.stdout)
		}
	}
}

// A descriptor check's --json is the HTTP decision API's answer.
func TestCheckDescriptorsJSON(t *testing.T) {
	addr := startFakeNode(t, &fakeAdmin{})
	r := runCLI(t, "check", "--plaintext", "--addr", addr, "--descriptor", "tenant_id=t_44", "--request-id", "r9", "--json")
	if r.code != 1 {
		t.Fatalf("exit %d; want 1 (stderr %q)", r.code, r.stderr)
	}
	want, err := api.AnswerJSON("r9", deniedCheck(), "  ")
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != string(want) {
		t.Errorf("stdout:\n%s\nwant the HTTP answer:\n%s", r.stdout, want)
	}
	for _, s := range []string{`"decision": "DENY",`, `"reason": "WINDOW_FULL",`, `"limit": 100,`, `"retry_after_ms": 600,`, `"mode": "SHADOW",`} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %s:\n%s", s, r.stdout)
		}
	}
	for _, s := range []string{"DECISION_", "REASON_", "POLICY_MODE_", `"limit": "100"`, "policyId"} {
		if strings.Contains(r.stdout, s) {
			t.Errorf("stdout has %s, a protobuf spelling:\n%s", s, r.stdout)
		}
	}
}

func TestCheckCommandBuildsRequest(t *testing.T) {
	f := &fakeLimiter{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "check", "--plaintext", "--addr", addr, "--name", "api", "--key", "allow",
		"--algorithm", "leaky_bucket_shaping", "--limit", "5", "--period", "1s", "--burst", "10",
		"--cost", "3", "--mode", "leased", "--fail", "closed", "--idempotency-key", "k1", "--request-id", "r1")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	want := &quoratev1.CheckRequest{
		RequestId: "r1",
		Mode:      quoratev1.Mode_MODE_LEASED,
		Items: []*quoratev1.Item{{
			Name:           "api",
			Key:            "allow",
			Algorithm:      quoratev1.Algorithm_ALGORITHM_LEAKY_BUCKET_SHAPING,
			Limit:          5,
			Period:         durationpb.New(time.Second),
			Burst:          10,
			Cost:           3,
			Fail:           quoratev1.FailMode_FAIL_MODE_CLOSED,
			IdempotencyKey: "k1",
		}},
	}
	if got := f.lastRequest(); !proto.Equal(got, want) {
		t.Errorf("server got\n%v\nwant\n%v", got, want)
	}
}

func TestCheckUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	r := runCLI(t, "check", "--plaintext", "--addr", addr, "--name", "api", "--key", "k", "--limit", "1", "--period", "1s")
	if r.code != 2 || !strings.Contains(r.stderr, "quorate: Unavailable: ") || !strings.Contains(r.stderr, addr) {
		t.Errorf("exit %d, stderr %q; want 2 and Unavailable naming %s", r.code, r.stderr, addr)
	}
}

func TestStatusCommand(t *testing.T) {
	addr := startFakeNode(t, &fakeLimiter{})
	r := runCLI(t, "status", "--plaintext", "--addr", addr)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	for _, s := range []string{"answered by n1", "n1    127.0.0.1:7401  -     alive", "SHARD  LEADER  REPLICAS", " ago"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout does not contain %q:\n%s", s, r.stdout)
		}
	}
	r = runCLI(t, "status", "--plaintext", "--addr", addr, "--json")
	var resp quoratev1.StatusResponse
	if r.code != 0 || protojson.Unmarshal([]byte(r.stdout), &resp) != nil || resp.GetNodeId() != "n1" {
		t.Errorf("status --json: exit %d, stdout %q", r.code, r.stdout)
	}
}
