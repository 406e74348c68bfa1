package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/internal/cliview"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// fakeAdmin is a node's policy side: it records the last request and
// answers with canned responses.
type fakeAdmin struct {
	pb.UnimplementedRateLimiterServer
	pb.UnimplementedAdminServer

	version atomic.Uint64 // what Status reports as policy_version

	mu      sync.Mutex
	onApply func()                    // called when ApplyPolicies answers, if set; guarded by mu
	last    proto.Message             // guarded by mu
	nodes   []*pb.NodeStatus          // Status's nodes; guarded by mu
	apply   *pb.ApplyPoliciesResponse // guarded by mu
	err     error                     // every policy call and Leave fail with it; guarded by mu
	// statusErr fails Status; guarded by mu.
	statusErr error
	// leaveWait makes Leave wait for the call's deadline, as a node whose
	// replicas are still moving does; guarded by mu.
	leaveWait bool
}

func (f *fakeAdmin) record(req proto.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = req
	return f.err
}

func (f *fakeAdmin) lastRequest() proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

var appliedV7 = &pb.ApplyPoliciesResponse{Version: 7, Added: []string{"plan_free"}, Diff: "+ plan_free\n~ plan_pro: config.rate 3000/min -> 4000/min\n", Applied: true}

func (f *fakeAdmin) ApplyPolicies(_ context.Context, req *pb.ApplyPoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.onApply != nil {
		f.onApply()
	}
	if f.apply != nil {
		return f.apply, nil
	}
	return appliedV7, nil
}

func (f *fakeAdmin) DeletePolicies(_ context.Context, req *pb.DeletePoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	return &pb.ApplyPoliciesResponse{Version: 8, Removed: req.GetPolicyIds(), Diff: "- " + strings.Join(req.GetPolicyIds(), "\n- "), Applied: !req.GetDryRun()}, f.record(req)
}

func (f *fakeAdmin) GetPolicy(_ context.Context, req *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error) {
	return &pb.GetPolicyResponse{Version: 7, Json: `{"policy_id":"plan_pro","scope":{"tenant_tier":"PRO","route":["/v1/*","/v2/x"]},"key":["tenant_id"],"algorithm":"TOKEN_BUCKET","config":{"rate":"3000/min","capacity":200},"mode":"HARD"}`}, f.record(req)
}

func (f *fakeAdmin) ListPolicies(_ context.Context, req *pb.ListPoliciesRequest) (*pb.ListPoliciesResponse, error) {
	return &pb.ListPoliciesResponse{Version: 7, Policies: []string{
		`{"policy_id":"plan_pro","layer":"TENANT","kind":"PLAN","scope":{"tenant_tier":"PRO"},"key":["tenant_id"],"algorithm":"TOKEN_BUCKET","config":{"rate":"3000/min","capacity":200}}`,
		`{"policy_id":"plan_free","layer":"TENANT","kind":"PLAN","mode":"SHADOW","enabled":false,"scope":{"tenant_tier":"FREE"},"limits":[{"name":"burst","algorithm":"SLIDING_WINDOW","config":{"limit":"10/5s"}},{"name":"sustained","config":{"limit":"60/min"}}]}`,
		`{"policy_id":"quota","scope":{"api_key_id":"","ip":null},"quota_tree":[{"level":"TENANT","algorithm":"SLIDING_WINDOW","config":{"limit":"50000/min"}},{"level":"API_KEY","config":{"limit":"1000/min"}}]}`,
	}, Blocks: []string{`{"block_id":"blk_1","scope":{"ip":"203.0.113.8"},"expires_at":"2026-12-02T02:00:00Z","reason":"abuse"}`}}, f.record(req)
}

func (f *fakeAdmin) Block(_ context.Context, req *pb.BlockRequest) (*pb.BlockResponse, error) {
	return &pb.BlockResponse{BlockId: "blk_2", ExpiresAt: timestamppb.New(time.Date(2026, 12, 2, 1, 30, 0, 0, time.UTC)), Version: 9}, f.record(req)
}

func (f *fakeAdmin) Unblock(_ context.Context, req *pb.UnblockRequest) (*pb.ApplyPoliciesResponse, error) {
	return &pb.ApplyPoliciesResponse{Version: 10, Applied: true}, f.record(req)
}

func (f *fakeAdmin) Explain(_ context.Context, req *pb.ExplainRequest) (*pb.ExplainResponse, error) {
	return &pb.ExplainResponse{Version: 7, Matches: []*pb.PolicyMatch{
		{PolicyId: "t_44_override", Selected: true, Why: "selected: best in layer TENANT (kind OVERRIDE, priority 0)",
			Layer: "TENANT", LayerFrom: "inferred from key tenant_id", Kind: "OVERRIDE", KindFrom: "inferred from an exact scope.tenant_id"},
		{PolicyId: "plan_pro", Why: "not selected: policy t_44_override wins layer TENANT (OVERRIDE beats PLAN)",
			Layer: "TENANT", LayerFrom: "written", Kind: "PLAN", KindFrom: "written"},
	}, Decision: deniedCheck()}, f.record(req)
}

func deniedCheck() *pb.CheckResponse {
	return &pb.CheckResponse{Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_OVER_LIMIT, AppliedPolicyId: "t_44_override",
		PolicyVersion: 7, DryRun: true, Policies: []*pb.PolicyResult{
			{PolicyId: "t_44_override", Mode: pb.PolicyMode_POLICY_MODE_HARD, Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_OVER_LIMIT,
				Limit: 100, Remaining: 0, ResetAfter: durationpb.New(30 * time.Second), RetryAfter: durationpb.New(600 * time.Millisecond),
				Layer: "TENANT", Algorithm: pb.Algorithm_ALGORITHM_SLIDING_WINDOW},
			{PolicyId: "new_limit", Mode: pb.PolicyMode_POLICY_MODE_SHADOW, Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT,
				Limit: 50, Remaining: 49, Layer: "API_KEY", Algorithm: pb.Algorithm_ALGORITHM_GCRA},
			// Allowed, then refunded: the wire says DENY, the request was
			// not denied by it.
			{PolicyId: "ip_safety", Mode: pb.PolicyMode_POLICY_MODE_HARD, Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_REFUNDED,
				Limit: 200, Remaining: 200, ResetAfter: durationpb.New(8669559184), Layer: "IP", Algorithm: pb.Algorithm_ALGORITHM_TOKEN_BUCKET},
			// Over its limit, but a shadow policy never denies.
			{PolicyId: "trial", Mode: pb.PolicyMode_POLICY_MODE_SHADOW, Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_SHADOW_WOULD_DENY,
				Limit: 30, ResetAfter: durationpb.New(88669469479), RetryAfter: durationpb.New(30769990262), Layer: "TENANT", Algorithm: pb.Algorithm_ALGORITHM_SLIDING_WINDOW},
		}}
}

func (f *fakeAdmin) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return deniedCheck(), f.record(req)
}

func (f *fakeAdmin) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	return &pb.StatusResponse{NodeId: "n1", Nodes: f.nodes, PolicyVersion: f.version.Load()}, nil
}

// Leave answers as a node that has left at epoch 17, unless f.err or
// f.leaveWait say otherwise. A call without a deadline does not hang the
// test: it answers after 10s.
func (f *fakeAdmin) Leave(ctx context.Context, req *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	wait := f.leaveWait
	f.mu.Unlock()
	if wait {
		select {
		case <-ctx.Done():
			return nil, status.Error(codes.DeadlineExceeded, "leave: the replicas are still moving (quorate status shows them); the node stays until they are done")
		case <-time.After(10 * time.Second):
		}
	}
	return &pb.LeaveResponse{Epoch: 17}, nil
}

func (f *fakeAdmin) RemoveNode(_ context.Context, req *pb.RemoveNodeRequest) (*pb.RemoveNodeResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &pb.RemoveNodeResponse{Epoch: 9}, nil
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// expectRun checks a run's exit status and what stdout and stderr hold.
func expectRun(t *testing.T, r result, code int, out, errOut []string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d; want %d (stdout %q, stderr %q)", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range out {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout does not contain %q:\n%s", s, r.stdout)
		}
	}
	for _, s := range errOut {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not contain %q:\n%s", s, r.stderr)
		}
	}
}

const policiesYAML = "policies:\n  - policy_id: plan_free\n    scope: { tenant_tier: FREE }\n"

func TestPolicyApply(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	// A node that never catches up: --wait=false must not wait for it.
	f.mu.Lock()
	f.nodes = []*pb.NodeStatus{{Id: "n1", RpcAddr: addr, State: pb.NodeState_NODE_STATE_ALIVE}}
	f.mu.Unlock()
	f.version.Store(6)
	file := writeFile(t, "policies.yaml", policiesYAML)
	r := runCLI(t, "policy", "apply", "--plaintext", "--addr", addr, "-f", file, "--prune", "--wait=false", "--wait-timeout", "1s")
	expectRun(t, r, 0, []string{"+ plan_free\n~ plan_pro: config.rate 3000/min -> 4000/min\napplied version 7\n"}, nil)
	want := &pb.ApplyPoliciesRequest{Document: policiesYAML, SourceName: file, Prune: true}
	if got := f.lastRequest(); !proto.Equal(got, want) {
		t.Errorf("server got %v; want %v", got, want)
	}
	if strings.Contains(r.stdout, "live on") {
		t.Errorf("--wait=false waited:\n%s", r.stdout)
	}

	f.mu.Lock()
	f.apply = &pb.ApplyPoliciesResponse{Version: 6, Diff: "+ plan_free\n"}
	f.mu.Unlock()
	r = runCLI(t, "policy", "apply", "--plaintext", "--addr", addr, "-f", file, "--dry-run")
	expectRun(t, r, 0, []string{"+ plan_free\ndry run: nothing applied\n"}, nil)
	if got := f.lastRequest().(*pb.ApplyPoliciesRequest); !got.GetDryRun() || got.GetPrune() {
		t.Errorf("server got %v; want dry_run and no prune", got)
	}
}

// TestPolicyApplyPrintsWarnings: every warning the node answers is printed,
// on a dry run and on an apply.
func TestPolicyApplyPrintsWarnings(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	file := writeFile(t, "policies.yaml", policiesYAML)
	warnings := []string{
		"policy payments: scoped by route, but its layer is TENANT, inferred from key tenant_id: policy plan_pro wins layer TENANT over it (PLAN beats ROUTE) wherever both match; write layer: ROUTE to apply it beside them, or layer: TENANT to keep this",
		"policy global can never decide: wherever it matches, policy global2 matches too and wins layer GLOBAL (priority 1 beats 0); give it another layer, kind or priority, or remove it",
	}
	f.mu.Lock()
	f.apply = &pb.ApplyPoliciesResponse{Version: 6, Diff: "+ payments\n", Warnings: warnings}
	f.mu.Unlock()
	r := runCLI(t, "policy", "apply", "--plaintext", "--addr", addr, "-f", file, "--dry-run")
	expectRun(t, r, 0, []string{"+ payments\nwarning: " + warnings[0] + "\nwarning: " + warnings[1] + "\ndry run: nothing applied\n"}, nil)

	f.mu.Lock()
	f.apply = &pb.ApplyPoliciesResponse{Version: 7, Diff: "+ payments\n", Warnings: warnings[:1], Applied: true}
	f.mu.Unlock()
	r = runCLI(t, "policy", "apply", "--plaintext", "--addr", addr, "-f", file, "--wait=false")
	expectRun(t, r, 0, []string{"+ payments\nwarning: " + warnings[0] + "\napplied version 7\n"}, nil)
}

func TestPolicyApplyErrors(t *testing.T) {
	f := &fakeAdmin{err: status.Error(codes.InvalidArgument, "policies.yaml:3:5: policy plan_free: config.rate: \"60/mn\": unknown unit \"mn\"")}
	addr := startFakeNode(t, f)
	file := writeFile(t, "policies.yaml", policiesYAML)
	big := writeFile(t, "big.yaml", strings.Repeat("#", maxDocument+1))
	base := []string{"policy", "apply", "--plaintext", "--addr", addr}
	tests := []struct {
		name   string
		args   []string
		code   int
		errOut string
	}{
		{"refused", []string{"-f", file}, 1, `quorate: InvalidArgument: policies.yaml:3:5: policy plan_free: config.rate: "60/mn": unknown unit "mn"`},
		{"no file flag", nil, 2, `required flag(s) "file" not set`},
		{"missing file", []string{"-f", "/nonexistent/p.yaml"}, 2, "-f: open /nonexistent/p.yaml"},
		{"too large to prune", []string{"-f", big, "--prune"}, 2, "a pruning apply must be one"},
		{"large and empty", []string{"-f", big}, 1, "empty document"},
		{"wait timeout", []string{"-f", file, "--wait-timeout", "0s"}, 2, "--wait-timeout 0s: must be positive"},
		{"timeout", []string{"-f", file, "--timeout", "-1s"}, 2, "--timeout -1s: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectRun(t, runCLI(t, append(append([]string(nil), base...), tt.args...)...), tt.code, nil, []string{tt.errOut})
		})
	}
}

// threeNodes starts three fake nodes; the first lists all of them (and a
// dead fourth) in Status.
func threeNodes(t *testing.T) []*fakeAdmin {
	fs := []*fakeAdmin{{}, {}, {}}
	var nodes []*pb.NodeStatus
	for i, f := range fs {
		nodes = append(nodes, &pb.NodeStatus{Id: "n" + string(rune('1'+i)), RpcAddr: startFakeNode(t, f), State: pb.NodeState_NODE_STATE_ALIVE})
	}
	nodes = append(nodes, &pb.NodeStatus{Id: "n4", RpcAddr: "127.0.0.1:1", State: pb.NodeState_NODE_STATE_DEAD})
	fs[0].mu.Lock()
	fs[0].nodes = nodes
	fs[0].mu.Unlock()
	return fs
}

func TestPolicyApplyWait(t *testing.T) {
	fs := threeNodes(t)
	fs[0].version.Store(7)
	fs[2].version.Store(9) // already past it: live too
	fs[1].version.Store(6)
	fs[0].mu.Lock()
	fs[0].onApply = func() {
		time.AfterFunc(150*time.Millisecond, func() { fs[1].version.Store(7) })
	}
	addr := fs[0].nodes[0].RpcAddr
	fs[0].mu.Unlock()
	file := writeFile(t, "policies.yaml", policiesYAML)
	r := runCLI(t, "policy", "apply", "--plaintext", "--addr", addr, "-f", file)
	expectRun(t, r, 0, []string{"applied version 7\nlive on n1 after "}, nil)
	m := regexp.MustCompile(`live on n1 after (\S+), n2 after (\S+), n3 after (\S+)\n`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	took := func(s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if n2 := took(m[2]); n2 < 145*time.Millisecond || n2 > 5*time.Second || took(m[1]) >= n2 || took(m[3]) >= n2 {
		t.Errorf("n1 %s, n2 %s, n3 %s: want n2 after 150ms (less the apply's answer) and the others sooner", m[1], m[2], m[3])
	}
}

func TestPolicyApplyWaitTimesOut(t *testing.T) {
	fs := threeNodes(t)
	fs[0].version.Store(7)
	fs[1].version.Store(7)
	fs[2].version.Store(6)
	file := writeFile(t, "policies.yaml", policiesYAML)
	start := time.Now()
	r := runCLI(t, "policy", "apply", "--plaintext", "--addr", fs[0].nodes[0].RpcAddr, "-f", file, "--wait-timeout", "300ms")
	expectRun(t, r, 1, []string{"live on n1 after ", ", n2 after "}, []string{"quorate: --wait-timeout 300ms: version 7 not live on n3 (at version 6)"})
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("gave up after %v", el)
	}
	if strings.Contains(r.stdout+r.stderr, "n4") {
		t.Errorf("waited for the dead n4:\n%s\n%s", r.stdout, r.stderr)
	}
}

func TestPolicyGet(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "policy", "get", "plan_pro", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"{\n  \"policy_id\": \"plan_pro\",\n  \"scope\": {\n    \"tenant_tier\": \"PRO\","}, nil)
	if got := f.lastRequest(); !proto.Equal(got, &pb.GetPolicyRequest{PolicyId: "plan_pro"}) {
		t.Errorf("server got %v", got)
	}
	r = runCLI(t, "policy", "get", "plan_pro", "--plaintext", "--addr", addr, "-o", "yaml")
	want := `policy_id: plan_pro
scope:
    tenant_tier: PRO
    route:
        - /v1/*
        - /v2/x
key:
    - tenant_id
algorithm: TOKEN_BUCKET
config:
    rate: 3000/min
    capacity: 200
mode: HARD
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, -o yaml:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	expectRun(t, runCLI(t, "policy", "get", "plan_pro", "--plaintext", "--addr", addr, "-o", "xml"), 2, nil, []string{`-o "xml": want json or yaml`})
	expectRun(t, runCLI(t, "policy", "get", "--plaintext", "--addr", addr), 2, nil, []string{"accepts 1 arg(s), received 0"})
}

func TestPolicyList(t *testing.T) {
	addr := startFakeNode(t, &fakeAdmin{})
	r := runCLI(t, "policy", "list", "--plaintext", "--addr", addr)
	want := `version 7: 3 policies, 1 blocks

ID         LAYER   KIND  MODE               SCOPE                            LIMIT
plan_pro   TENANT  PLAN  HARD               tenant_tier=PRO                  TOKEN_BUCKET capacity=200 rate=3000/min
plan_free  TENANT  PLAN  SHADOW (disabled)  tenant_tier=FREE                 burst SLIDING_WINDOW limit=10/5s; sustained limit=60/min
quota      -       -     HARD               api_key_id=(absent) ip=(absent)  TENANT SLIDING_WINDOW limit=50000/min > API_KEY limit=1000/min

BLOCK  SCOPE           EXPIRES               REASON
blk_1  ip=203.0.113.8  2026-12-02T02:00:00Z  abuse
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	r = runCLI(t, "policy", "list", "--plaintext", "--addr", addr, "-o", "json")
	expectRun(t, r, 0, []string{`"version": 7`, `"policy_id": "plan_free"`, `"block_id": "blk_1"`}, nil)
}

func TestPolicyDelete(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "policy", "delete", "a", "b", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"- a\n- b\napplied version 8\n"}, nil)
	if got := f.lastRequest(); !proto.Equal(got, &pb.DeletePoliciesRequest{PolicyIds: []string{"a", "b"}}) {
		t.Errorf("server got %v", got)
	}
	r = runCLI(t, "policy", "delete", "a", "--dry-run", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"dry run: nothing applied"}, nil)
	expectRun(t, runCLI(t, "policy", "delete", "--plaintext", "--addr", addr), 2, nil, []string{"requires at least 1 arg(s)"})
}

func TestPolicyExplain(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "policy", "explain", "--plaintext", "--addr", addr, "--descriptor", "tenant_id=t_44", "--descriptor", "route=/v1/x")
	expectRun(t, r, 0, []string{
		"policy version 7\n",
		"POLICY         SELECTED  LAYER                                 KIND                                               WHY\n",
		"t_44_override  yes       TENANT (inferred from key tenant_id)  OVERRIDE (inferred from an exact scope.tenant_id)  selected: best in layer TENANT (kind OVERRIDE, priority 0)\n",
		"plan_pro       no        TENANT (written)                      PLAN (written)                                     not selected: policy t_44_override wins layer TENANT (OVERRIDE beats PLAN)\n",
		"dry run:\ndecision        DENY\nreason          WINDOW_FULL\napplied policy  t_44_override\n",
		"ip_safety      IP       HARD    ALLOW→REFUNDED       REFUNDED ",
		"trial          TENANT   SHADOW  WOULD DENY (shadow)  SHADOW_WOULD_DENY ",
	}, nil)
	want := &pb.ExplainRequest{Descriptors: &pb.Descriptors{TenantId: "t_44", Route: "/v1/x"}}
	if got := f.lastRequest(); !proto.Equal(got, want) {
		t.Errorf("server got %v; want %v", got, want)
	}
	expectRun(t, runCLI(t, "policy", "explain", "--plaintext", "--addr", addr), 2, nil, []string{"--descriptor: at least one NAME=VALUE"})
}

func TestParseDescriptors(t *testing.T) {
	risk := 0.95
	kvs := []string{"tenant_id=t_44", "api_key_id=k_1", "user_id=u_2", "ip=203.0.113.8", "route=/v1/x=y", "method=POST",
		"service=billing", "region=eu", "tenant_tier=PRO", "risk_score=0.95", "idempotency_key=idem", "cost=3",
		"custom.team=payments", "custom.empty="}
	want := &pb.Descriptors{TenantId: "t_44", ApiKeyId: "k_1", UserId: "u_2", Ip: "203.0.113.8", Route: "/v1/x=y", Method: "POST",
		Service: "billing", Region: "eu", TenantTier: "PRO", RiskScore: &risk, IdempotencyKey: "idem", Cost: 3,
		Custom: map[string]string{"team": "payments", "empty": ""}}
	got, err := parseDescriptors(kvs)
	if err != nil || !proto.Equal(got, want) {
		t.Errorf("parseDescriptors = %v, %v; want %v", got, err, want)
	}
	if len(descriptorSetters) != len(descriptorNames()) {
		t.Errorf("%d setters for %d names", len(descriptorSetters), len(descriptorNames()))
	}
	bad := []struct{ kv, err string }{
		{"tenant=t", `--descriptor tenant: unknown descriptor (known: tenant_id, api_key_id, user_id, ip, route, method, service, region, tenant_tier, risk_score, idempotency_key, cost, and custom.<name>)`},
		{"custom.=x", "--descriptor custom.: unknown descriptor"},
		{"tenant_id", `--descriptor "tenant_id": want NAME=VALUE`},
		{"=x", `--descriptor "=x": want NAME=VALUE`},
		{"risk_score=1.5", `--descriptor risk_score: "1.5": want a number from 0 to 1`},
		{"risk_score=high", `--descriptor risk_score: "high": want a number from 0 to 1`},
		{"cost=-1", `--descriptor cost: "-1": want a whole number, 0 or more`},
	}
	for _, b := range bad {
		if _, err := parseDescriptors([]string{b.kv}); err == nil || !strings.Contains(err.Error(), b.err) {
			t.Errorf("parseDescriptors(%q) = %v; want %q", b.kv, err, b.err)
		}
	}
	if _, err := parseDescriptors([]string{"ip=1.2.3.4", "ip=5.6.7.8"}); err == nil || err.Error() != "--descriptor ip: given twice" {
		t.Errorf("a descriptor given twice: %v", err)
	}
}

func TestCheckDescriptors(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "check", "--plaintext", "--addr", addr, "--descriptor", "tenant_id=t_44", "--descriptor", "custom.team=a",
		"--mode", "leased", "--request-id", "r9")
	expectRun(t, r, 1, []string{
		"decision        DENY\nreason          WINDOW_FULL\napplied policy  t_44_override\npolicy version  7\ndry run         yes: nothing consumed\n",
		"POLICY         LAYER    MODE    DECISION             REASON             LIMIT  REMAINING  RESET AFTER  RETRY AFTER\n",
		"t_44_override  TENANT   HARD    DENY                 WINDOW_FULL        100    0          30s          600ms\n",
		"new_limit      API_KEY  SHADOW  ALLOW                WITHIN_LIMIT       50     49         0s           0s\n",
		"ip_safety      IP       HARD    ALLOW→REFUNDED       REFUNDED           200    200        8.67s        0s\n",
		"trial          TENANT   SHADOW  WOULD DENY (shadow)  SHADOW_WOULD_DENY  30     0          1m29s        30.8s\n",
		"\nALLOW→REFUNDED: the policy allowed; what it took was given back because another policy denied.\n",
	}, nil)
	want := &pb.CheckRequest{RequestId: "r9", Mode: pb.Mode_MODE_LEASED, Descriptors: &pb.Descriptors{TenantId: "t_44", Custom: map[string]string{"team": "a"}}}
	if got := f.lastRequest(); !proto.Equal(got, want) {
		t.Errorf("server got %v; want %v", got, want)
	}
	bad := []struct {
		args   []string
		errOut string
	}{
		{[]string{"--descriptor", "tenant_id=t", "--name", "api", "--limit", "5"}, "--descriptor cannot be combined with --name, --limit"},
		{[]string{"--descriptor", "tenant=t"}, "--descriptor tenant: unknown descriptor (known: tenant_id,"},
		{[]string{"--descriptor", "tenant_id=t", "--mode", "fast"}, "--mode: client: unknown mode"},
		{[]string{"--name", "api"}, `required flag(s) "key", "limit", "period" not set (or check by --descriptor)`},
	}
	for _, b := range bad {
		r := runCLI(t, append([]string{"check", "--plaintext", "--addr", addr}, b.args...)...)
		expectRun(t, r, 2, nil, []string{b.errOut})
	}
}

func TestBlock(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "block", "--plaintext", "--addr", addr, "--descriptor", "ip=203.0.113.0/24", "--descriptor", "custom.team=x",
		"--for", "10m", "--reason", "abuse")
	expectRun(t, r, 0, []string{"blocked: blk_2 until 2026-12-02T01:30:00Z (version 9)\n"}, nil)
	want := &pb.BlockRequest{Descriptors: map[string]string{"ip": "203.0.113.0/24", "custom.team": "x"}, Duration: durationpb.New(10 * time.Minute), Reason: "abuse"}
	if got := f.lastRequest(); !proto.Equal(got, want) {
		t.Errorf("server got %v; want %v", got, want)
	}
	bad := []struct {
		args   []string
		errOut string
	}{
		{[]string{"--for", "10m"}, "--descriptor: at least one NAME=MATCHER"},
		{[]string{"--descriptor", "ip=1.2.3.4"}, `required flag(s) "for" not set`},
		{[]string{"--descriptor", "ip=1.2.3.4", "--for", "0s"}, "--for 0s: want more than 0 and at most 168h0m0s"},
		{[]string{"--descriptor", "ip=1.2.3.4", "--for", "169h"}, "--for 169h0m0s: want more than 0"},
		{[]string{"--descriptor", "risk_score=1", "--for", "1m"}, "--descriptor risk_score: unknown descriptor (known: tenant_id, api_key_id, user_id, ip, route, method, service, region, tenant_tier, and custom.<name>)"},
		{[]string{"--descriptor", "ip=1", "--descriptor", "ip=2", "--for", "1m"}, "--descriptor ip: given twice"},
	}
	for _, b := range bad {
		expectRun(t, runCLI(t, append([]string{"block", "--plaintext", "--addr", addr}, b.args...)...), 2, nil, []string{b.errOut})
	}

	r = runCLI(t, "unblock", "blk_2", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"unblocked: blk_2 (version 10)\n"}, nil)
	if got := f.lastRequest(); !proto.Equal(got, &pb.UnblockRequest{BlockId: "blk_2"}) {
		t.Errorf("server got %v", got)
	}
	f.mu.Lock()
	f.err = status.Error(codes.NotFound, "no block blk_3")
	f.mu.Unlock()
	expectRun(t, runCLI(t, "unblock", "blk_3", "--plaintext", "--addr", addr), 1, nil, []string{"quorate: NotFound: no block blk_3"})
}

// TestViewError: a policy the node sent that is not JSON fails the command
// (exit status 1); a view's write error is returned as it is.
func TestViewError(t *testing.T) {
	var ee *exitError
	if err := viewError(cliview.PolicyJSON(io.Discard, "{")); !errors.As(err, &ee) || ee.code != exitFailure {
		t.Errorf("not JSON: %v; want a failure", err)
	}
	werr := errors.New("closed")
	if err := viewError(cliview.PolicyYAML(failWriter{werr}, `{"a":1}`)); err != werr {
		t.Errorf("write error: %v; want %v", err, werr)
	}
	if err := viewError(nil); err != nil {
		t.Errorf("viewError(nil) = %v", err)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }
