package api

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/clock"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/envoyconf"
	"github.com/quorate/quorate/ring"
)

// The Envoy service is tested against a real engine and state machine
// (one shard, in memory, stamped by a manual clock) with a configuration
// imported by policy/envoyconf, through a client made from the published
// protos (go-control-plane).

const rlsConfig = `
domain: web
descriptors:
  - key: route
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 3, name: login}
  - key: route
    value: /search
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value: /static
    rate_limit: {unlimited: true}
  - key: route
    value: /admin
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 50
      replaces: [{name: login}]
`

// oneShard applies every submit to one machine, as a leader would.
type oneShard struct {
	clock *clock.Manual
	ring  *ring.Ring
	m     *fsm.Machine
}

func (s *oneShard) Routes() (*ring.Ring, <-chan struct{}) { return s.ring, nil }

func (s *oneShard) Submit(_ context.Context, _ int, ops []fsm.Op, atomic bool) (decide.Applied, error) {
	cmd := &fsm.Command{Now: s.clock.Now().UnixNano(), Ops: append([]fsm.Op(nil), ops...)}
	if atomic {
		for i := range cmd.Ops {
			cmd.Ops[i].Group = 1
		}
	}
	return decide.Applied{Results: s.m.Apply(cmd, nil), Now: s.m.Now()}, nil
}

type staticPolicies struct{ s *policy.Snapshot }

func (p staticPolicies) Policies() (*policy.Snapshot, bool) { return p.s, true }

// rlsNode is the part of a Node the Envoy service uses.
type rlsNode struct {
	Node
	engine *decide.Engine
	set    meta.PolicyState
	clock  *clock.Manual
}

func (n *rlsNode) Engine() *decide.Engine      { return n.engine }
func (n *rlsNode) PolicySet() meta.PolicyState { return n.set }
func (n *rlsNode) Now() time.Time              { return n.clock.Now() }

func startRLS(t *testing.T, cfg string) (rlsv3.RateLimitServiceClient, *clock.Manual) {
	t.Helper()
	return startRLSWith(t, cfg, nil)
}

// startRLSWith is startRLS with the imported policies edited by edit.
func startRLSWith(t *testing.T, cfg string, edit func([]policy.Policy)) (rlsv3.RateLimitServiceClient, *clock.Manual) {
	t.Helper()
	c, err := envoyconf.Parse("rls.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := envoyconf.Policies(c, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(ps)
	}
	snap, err := policy.Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	// 20s into a minute, so windows and resets are whole numbers to check.
	clk := clock.NewManual(time.Date(2026, 12, 2, 10, 0, 20, 0, time.UTC))
	r, err := ring.New(1)
	if err != nil {
		t.Fatal(err)
	}
	eng := decide.New(decide.Config{Shards: &oneShard{clock: clk, ring: r, m: fsm.New(fsm.Config{})}, Policies: staticPolicies{snap}, Clock: clk.Now})
	t.Cleanup(eng.Close)
	node := &rlsNode{engine: eng, set: meta.PolicyState{Version: 1, Policies: policy.SetOf(ps)}, clock: clk}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	registerRLS(srv, &rls{node: node})
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return rlsv3.NewRateLimitServiceClient(conn), clk
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func shouldRateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), name) {
			return h.GetValue()
		}
	}
	return ""
}

func TestShouldRateLimitCounts(t *testing.T) {
	c, _ := startRLS(t, rlsConfig)
	req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login")}}
	for i, want := range []uint32{2, 1, 0} {
		resp := shouldRateLimit(t, c, req)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != want {
			t.Fatalf("request %d: %v remaining %d, want OK remaining %d", i+1, resp.GetOverallCode(), st.GetLimitRemaining(), want)
		}
		if l := st.GetCurrentLimit(); l.GetRequestsPerUnit() != 3 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetName() != "login" {
			t.Fatalf("current_limit %v", l)
		}
		if d := st.GetDurationUntilReset().AsDuration(); d != 40*time.Second {
			t.Fatalf("duration_until_reset %v, want 40s (the minute's window ends then)", d)
		}
	}
	resp := shouldRateLimit(t, c, req)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th of 3/min: %v", resp)
	}
	if header(resp, "RateLimit-Limit") != "3" || header(resp, "RateLimit-Remaining") != "0" || header(resp, "RateLimit-Reset") != "40" {
		t.Fatalf("rate limit headers: %v", resp.GetResponseHeadersToAdd())
	}
	if header(resp, "x-rate-limit-decision") != "DENY" || !strings.HasPrefix(header(resp, "x-policy-id"), "envoy.web.") || header(resp, "x-request-id") == "" {
		t.Fatalf("trace headers: %v", resp.GetResponseHeadersToAdd())
	}
}

func TestShouldRateLimitHitsAddend(t *testing.T) {
	c, _ := startRLS(t, rlsConfig)
	d := desc("user", "u1")
	resp := shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 45, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 5 {
		t.Fatalf("after 45 of 50: remaining %d", got)
	}
	// A descriptor's own hits_addend overrides the request's; 0 counts nothing.
	d0 := desc("user", "u1")
	d0.HitsAddend = wrapperspb.UInt64(0)
	resp = shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 45, Descriptors: []*ratelimitv3.RateLimitDescriptor{d0}})
	if got := resp.GetStatuses()[0]; got.GetLimitRemaining() != 5 || got.GetCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("hits_addend 0: %v", got)
	}
	resp = shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 6, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("6 more of 5 left: %v", resp.GetOverallCode())
	}
	// The denied 6 consumed nothing: 5 still fit.
	resp = shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 5, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Fatalf("5 of the 5 left: %v", resp)
	}
	// Another user counts separately (the key-only node counts per value).
	resp = shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u2")}})
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 49 {
		t.Fatalf("another user: remaining %d", got)
	}
}

func TestShouldRateLimitShadowUnlimitedZero(t *testing.T) {
	c, _ := startRLS(t, rlsConfig)
	search := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/search")}}
	for i := range 3 {
		resp := shouldRateLimit(t, c, search)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow, request %d: %v", i+1, resp)
		}
		if i > 0 && resp.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("shadow over its limit reports remaining 0: %v", resp.GetStatuses()[0])
		}
	}
	resp := shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/static")}})
	if st := resp.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != math.MaxUint32 || st.GetCurrentLimit() != nil {
		t.Fatalf("unlimited: %v", st)
	}
	resp = shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/admin")}})
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 0 {
		t.Fatalf("a limit of 0: %v", resp)
	}
}

// An unknown domain, or a descriptor with no node, answers as the
// reference does: OK, one status per descriptor, no limit.
func TestShouldRateLimitNoMatch(t *testing.T) {
	c, _ := startRLS(t, rlsConfig)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login"), desc("a", "b")}},
		{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/other"), desc("route", "/login", "x", "y")}},
	} {
		resp := shouldRateLimit(t, c, req)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 2 {
			t.Fatalf("%s: %v", req.GetDomain(), resp)
		}
		for _, st := range resp.GetStatuses() {
			if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 || st.GetDurationUntilReset() != nil {
				t.Fatalf("%s: status %v, want OK and nothing else", req.GetDomain(), st)
			}
		}
		if header(resp, "RateLimit-Limit") != "" || header(resp, "x-rate-limit-decision") != "ALLOW" {
			t.Fatalf("%s: headers %v", req.GetDomain(), resp.GetResponseHeadersToAdd())
		}
	}
}

// A limit named in another descriptor's replaces does not apply.
func TestShouldRateLimitReplaces(t *testing.T) {
	c, _ := startRLS(t, rlsConfig)
	req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login"), desc("user", "u1")}}
	for range 5 {
		resp := shouldRateLimit(t, c, req)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit() != nil {
			t.Fatalf("login is replaced by user's limit: %v", resp)
		}
	}
}

func TestShouldRateLimitBadRequests(t *testing.T) {
	c, _ := startRLS(t, rlsConfig)
	neg := desc("route", "/login")
	neg.IsNegativeHits = true
	over := desc("route", "/login")
	over.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	for _, tc := range []struct {
		req   *rlsv3.RateLimitRequest
		field string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "web"}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login"), {}}}, "descriptors[1].entries"},
		{&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login"), desc("", "x")}}, "descriptors[1].entries[0].key"},
		{&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login\n")}}, "descriptors[0].entries[0].value"},
		{&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", strings.Repeat("x", 300))}}, "descriptors[0].entries[0].value"},
		{&rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 2_000_000, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login")}}, "hits_addend"},
		{&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{neg}}, "descriptors[0].is_negative_hits"},
		{&rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{over}}, "descriptors[0].limit"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+": ") {
			t.Fatalf("want InvalidArgument naming %s, got %v", tc.field, err)
		}
	}
	// None of them counted: /login still has all 3.
	resp := shouldRateLimit(t, c, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login")}})
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 2 {
		t.Fatalf("after refused requests, remaining %d, want 2", got)
	}
}

// The windows are the reference's: aligned to the minute, a new one at
// the minute's end.
func TestShouldRateLimitWindows(t *testing.T) {
	c, clk := startRLS(t, rlsConfig)
	req := &rlsv3.RateLimitRequest{Domain: "web", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "/login")}}
	if resp := shouldRateLimit(t, c, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("3 of 3: %v", resp)
	}
	clk.Advance(39 * time.Second) // 10:00:59
	if resp := shouldRateLimit(t, c, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("same window: %v", resp)
	}
	clk.Advance(time.Second) // 10:01:00, a new window
	if resp := shouldRateLimit(t, c, req); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetDurationUntilReset().AsDuration() != time.Minute {
		t.Fatalf("next window: %v", resp)
	}
}

func TestShouldRateLimitNeedsCheckScope(t *testing.T) {
	if a := methodAccess(shouldRateLimitMethod); a.scopes == 0 || !a.loopback || a.audit {
		t.Fatalf("ShouldRateLimit access %+v, want the check scope as RateLimiter.Check", a)
	}
	if methodAccess(shouldRateLimitMethod) != methodAccess("/quorate.v1.RateLimiter/Check") {
		t.Fatal("ShouldRateLimit and Check differ in access")
	}
}

func envoySpec(p *policy.Policy) (*envoyconf.Spec, bool) { return envoyconf.SpecOf(p) }
