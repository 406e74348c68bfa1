package clustertest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

const gatewayPolicies = `
policies:
  - policy_id: gw_plan
    scope: { tenant_tier: GW }
    key: [tenant_id]
    algorithm: TOKEN_BUCKET
    config: { rate: 40/24h }
    consistency: LEASED
  - policy_id: gw_pay
    layer: ROUTE
    scope: { route: /pay }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 3/24h }
`

// dialGateway dials the cluster with the dev gateway token (lease scope).
func dialGateway(t *testing.T, c *clustertest.Cluster, role string) *client.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.DialCluster(ctx, []string{c.Nodes[0].RPC, c.Nodes[1].RPC, c.Nodes[2].RPC},
		client.WithDialOptions(c.DialOptions(role)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// TestEmbedded: a limiter embedded in a gateway decides a LEASED policy
// from its own leases (no log entry), a STRICT one in the shards, both in
// one request all-or-nothing; never over either limit; a policy change
// reaches it; only a lease-scope token may embed; the Gateway service
// refuses what a gateway may not do.
func TestEmbedded(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := pb.NewAdminClient(c.Client(0).Conn())
	applied, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: gatewayPolicies, SourceName: "gw.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	cl := dialGateway(t, c, "gateway")
	e, err := client.NewEmbedded(ctx, cl, client.EmbeddedConfig{Holder: "gw-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	await.True(t, 10*time.Second, "the gateway has the applied policy set", func() bool {
		return e.Policies().Version() >= applied.GetVersion()
	})
	check := func(tenant, route string) *decide.Answer {
		t.Helper()
		ans, err := e.Check(ctx, &decide.Request{Descriptors: &decide.Descriptors{TenantID: tenant, TenantTier: "GW", Route: route}})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}

	t.Run("leased policy from the gateway's leases", func(t *testing.T) {
		allowed := 0
		for range 60 {
			if a := check("t1", "/"); a.Decision == decide.Allow {
				allowed++
				if a.Results[0].Index != 0 {
					t.Fatalf("an allowed check of a LEASED policy came from log entry %d; want a lease", a.Results[0].Index)
				}
			}
		}
		if allowed == 0 || allowed > 40 {
			t.Errorf("%d of 60 allowed under 40/24h; want 1..40 (never over)", allowed)
		}
		if hits, _ := e.Leases().Decisions(); hits == 0 {
			t.Errorf("no decision from the lease table")
		}
	})

	t.Run("a prepared check decides from the lease", func(t *testing.T) {
		p, err := e.Prepare(&decide.Request{Descriptors: &decide.Descriptors{TenantID: "t3", TenantTier: "GW"}})
		if err != nil {
			t.Fatal(err)
		}
		allowed := 0
		for range 60 {
			ok, err := p.Allow(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				allowed++
			}
		}
		if allowed == 0 || allowed > 40 {
			t.Errorf("%d of 60 allowed under 40/24h; want 1..40 (never over)", allowed)
		}
	})

	t.Run("strict and leased in one request", func(t *testing.T) {
		var allowed int
		for n := range 5 {
			a := check("t2", "/pay")
			if a.Decision == decide.Allow {
				allowed++
			}
			for _, r := range a.Results {
				if r.PolicyID == "gw_pay" && r.Decision == decide.Allow && r.Index == 0 {
					t.Fatalf("check %d: the STRICT policy was not decided in the log: %+v", n+1, r)
				}
			}
		}
		if allowed != 3 {
			t.Errorf("%d of 5 allowed under the strict 3/24h; want exactly 3", allowed)
		}
		// The cluster's own view agrees: the strict bucket is spent.
		resp, err := c.Client(1).Check(ctx, &pb.CheckRequest{Mode: pb.Mode_MODE_STRICT, DryRun: true,
			Descriptors: &pb.Descriptors{TenantId: "t2", TenantTier: "GW", Route: "/pay"}})
		if err != nil || resp.GetDecision() != pb.Decision_DECISION_DENY {
			t.Errorf("a node's dry run after the gateway spent the bucket: %v %v; want DENY", resp, err)
		}
	})

	t.Run("a policy change reaches the gateway", func(t *testing.T) {
		wholes := sumMetric(c, "quorate_gateway_watch_bytes_total", `part="policy_set"`)
		deltas := sumMetric(c, "quorate_gateway_watch_bytes_total", `part="policy_delta"`)
		res, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: `
policies:
  - policy_id: gw_new
    scope: { tenant_tier: NEW }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 1/24h }
`})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		await.True(t, 5*time.Second, "the gateway decides with the new version", func() bool {
			return e.Policies().Version() >= res.GetVersion()
		})
		t.Logf("policy version %d reached the gateway in %v", res.GetVersion(), time.Since(start))
		a, err := e.Check(ctx, &decide.Request{Descriptors: &decide.Descriptors{TenantID: "x", TenantTier: "NEW"}})
		if err != nil || a.AppliedPolicyID != "gw_new" {
			t.Errorf("check after the change: %+v %v; want decided by gw_new", a, err)
		}
		// The change went as a delta: the one policy, not the set again.
		if w, d := sumMetric(c, "quorate_gateway_watch_bytes_total", `part="policy_set"`)-wholes,
			sumMetric(c, "quorate_gateway_watch_bytes_total", `part="policy_delta"`)-deltas; w != 0 || d <= 0 {
			t.Errorf("the change sent %v bytes of whole sets and %v of deltas; want only a delta", w, d)
		}
	})

	t.Run("the watch moves when its node dies", func(t *testing.T) {
		var dead int = -1
		await.True(t, 5*time.Second, "the gateway watches a node", func() bool {
			for i, n := range c.Nodes {
				if n.RPC == e.Watching() {
					dead = i
					return true
				}
			}
			return false
		})
		c.Kill(dead)
		t.Logf("killed n%d, whose Watch stream the gateway read", dead+1)
		alive := (dead + 1) % len(c.Nodes)
		res, err := pb.NewAdminClient(c.Client(alive).Conn()).ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: `
policies:
  - policy_id: gw_after
    scope: { tenant_tier: AFTER }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 1/24h }
`})
		if err != nil {
			t.Fatal(err)
		}
		await.True(t, 10*time.Second, "the change reaches the gateway through another node", func() bool {
			return e.Policies().Version() >= res.GetVersion()
		})
		if w := e.Watching(); w == c.Nodes[dead].RPC {
			t.Errorf("still watching the dead node %s", w)
		}
	})

	t.Run("only a lease-scope token embeds", func(t *testing.T) {
		app := dialGateway(t, c, "app")
		_, err := client.NewEmbedded(ctx, app, client.EmbeddedConfig{})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("embedding with a check-scope token: %v; want PermissionDenied", err)
		}
	})

	t.Run("the gateway service refuses what a gateway may not do", func(t *testing.T) {
		live := 0
		for !c.Running(live) {
			live++
		}
		conn, err := client.Dial(c.Nodes[live].RPC, c.DialOptions("gateway")...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		gw := pb.NewGatewayClient(conn.Conn())
		for _, tt := range []struct {
			name  string
			req   *pb.SubmitRequest
			field string
		}{
			{"reset", &pb.SubmitRequest{Holder: "h", Command: fsm.AppendCommand(nil, &fsm.Command{Ops: []fsm.Op{{Kind: fsm.OpReset, Key: "k"}}})}, "kind"},
			{"long lease", &pb.SubmitRequest{Holder: "h", Command: fsm.AppendCommand(nil, &fsm.Command{Ops: []fsm.Op{{Kind: fsm.OpGrant, Key: "k", Cost: 1, TTL: time.Hour,
				Limit: fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Second}}}})}, "ttl"},
			{"no holder", &pb.SubmitRequest{Command: fsm.AppendCommand(nil, &fsm.Command{Ops: []fsm.Op{{Kind: fsm.OpTake, Key: "k", Cost: 1}}})}, "holder"},
			{"bad shard", &pb.SubmitRequest{Holder: "h", Shard: 99, Command: fsm.AppendCommand(nil, &fsm.Command{Ops: []fsm.Op{{Kind: fsm.OpTake, Key: "k", Cost: 1}}})}, "shard"},
			{"garbage", &pb.SubmitRequest{Holder: "h", Command: []byte{0xff, 0x01}}, "command"},
		} {
			_, err := gw.Submit(ctx, tt.req)
			if status.Code(err) != codes.InvalidArgument || !containsField(err, tt.field) {
				t.Errorf("%s: %v; want InvalidArgument naming %s", tt.name, err, tt.field)
			}
		}
	})
}

func containsField(err error, field string) bool {
	return strings.Contains(status.Convert(err).Message(), field)
}

const middlewarePolicies = `
policies:
  - policy_id: mw_plan
    scope: { tenant_id: "*", route: /api }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 5/24h }
    fail_behavior: FAIL_CLOSED
  - policy_id: mw_open
    layer: ROUTE
    scope: { route: /open }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 5/24h }
    fail_behavior: FAIL_OPEN
`

// TestMiddlewareEmbedded: an HTTP service behind the SDK's middleware, the
// limiter embedded, against real nodes: a tenant of capacity 5 reaches
// the handler exactly 5 times and then gets 429 with Retry-After and the
// documented headers; with the cluster stopped, each policy's fail
// behaviour answers.
func TestMiddlewareEmbedded(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := pb.NewAdminClient(c.Client(0).Conn())
	applied, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: middlewarePolicies})
	if err != nil {
		t.Fatal(err)
	}
	e, err := client.NewEmbedded(ctx, dialGateway(t, c, "gateway"), client.EmbeddedConfig{Holder: "mw",
		CheckTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	await.True(t, 10*time.Second, "the gateway has the policies", func() bool { return e.Policies().Version() >= applied.GetVersion() })
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(client.Middleware(e, client.MiddlewareConfig{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		mu.Unlock()
		_, _ = w.Write([]byte("hello\n"))
	})))
	defer srv.Close()
	get := func(path, tenant string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("X-Tenant-Id", tenant)
		req.Header.Set("X-Request-Id", "mw-"+tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	var codes []int
	for range 8 {
		resp := get("/api", "t_mw")
		codes = append(codes, resp.StatusCode)
		if resp.Header.Get("X-Request-Id") != "mw-t_mw" || resp.Header.Get("X-Policy-Id") != "mw_plan" ||
			resp.Header.Get("RateLimit-Policy") != `"mw_plan";q=5` || resp.Header.Get("X-RateLimit-Limit") != "5" {
			t.Errorf("headers %v", resp.Header)
		}
		if resp.StatusCode == 429 && (resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Rate-Limit-Decision") != "DENY") {
			t.Errorf("a 429 without Retry-After or the decision: %v", resp.Header)
		}
	}
	if fmt.Sprint(codes) != "[200 200 200 200 200 429 429 429]" || calls["/api"] != 5 {
		t.Errorf("statuses %v, handler calls %d; want five 200s then 429s, and 5 calls", codes, calls["/api"])
	}
	for i := range c.Nodes {
		c.Stop(i)
	}
	if resp := get("/api", "t_closed"); resp.StatusCode != 503 || resp.Header.Get("X-Rate-Limit-Reason") != "STORE_UNAVAILABLE" {
		t.Errorf("FAIL_CLOSED with the cluster stopped: %d %v; want 503 STORE_UNAVAILABLE", resp.StatusCode, resp.Header)
	}
	if resp := get("/open", "t_open"); resp.StatusCode != 200 || resp.Header.Get("X-Rate-Limit-Reason") != "FAIL_OPEN" {
		t.Errorf("FAIL_OPEN with the cluster stopped: %d %v; want 200 FAIL_OPEN", resp.StatusCode, resp.Header)
	}
	if calls["/api"] != 5 || calls["/open"] != 1 {
		t.Errorf("handler calls %v; want /api 5 (none while failing closed) and /open 1", calls)
	}
}
