package clustertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The policies TestPolicies applies. Periods are long so that nothing
// refills while the test runs: every count below is exact.
const testPolicies = `policies:
  - policy_id: free_plan
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 5/24h }
  - policy_id: big_override
    scope: { tenant_id: t_big }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 50/24h }
  - policy_id: ip_safety
    scope: { ip: 10.0.0.0/8 }
    key: [ip]
    algorithm: FIXED_WINDOW
    config: { limit: 3/24h }
  - policy_id: shadow_route
    scope: { route: /v1/shadow }
    key: [tenant_id]
    mode: SHADOW
    algorithm: FIXED_WINDOW
    config: { limit: 1/24h }
  - policy_id: soft_route
    scope: { route: /v1/soft }
    key: [tenant_id]
    mode: SOFT
    algorithm: FIXED_WINDOW
    config: { limit: 1/24h }
  - policy_id: leased_plan
    scope: { tenant_tier: LEASED }
    key: [tenant_id]
    consistency: LEASED
    algorithm: TOKEN_BUCKET
    config: { rate: 5/24h }
  - policy_id: tree_plan
    scope: { tenant_tier: TREE }
    quota_tree:
      - { level: TENANT, key: [tenant_id], algorithm: FIXED_WINDOW, config: { limit: 4/24h } }
      - { level: API_KEY, key: [tenant_id, api_key_id], config: { limit: 2/24h } }
  - policy_id: idem_plan
    scope: { tenant_tier: IDEM }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 3/24h }
    idempotency: { mode: dedupe }
  - policy_id: raise_plan
    scope: { tenant_tier: RAISE }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 5/24h }
`

func adminClient(t *testing.T, c *clustertest.Cluster, i int, role string) pb.AdminClient {
	t.Helper()
	conn, err := grpc.NewClient(c.Nodes[i].RPC, c.DialOptions(role)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewAdminClient(conn)
}

// httpCheck is one POST /v1/limit/check to node i with the app's token.
type httpAnswer struct {
	Decision        string `json:"decision"`
	AppliedPolicyID string `json:"applied_policy_id"`
	Remaining       int64  `json:"remaining"`
	RetryAfterMS    int64  `json:"retry_after_ms"`
	Reason          string `json:"reason"`
	PolicyVersion   uint64 `json:"policy_version"`
	LimitHeaders    struct {
		Limit     string `json:"x-ratelimit-limit"`
		Remaining string `json:"x-ratelimit-remaining"`
		Reset     string `json:"x-ratelimit-reset"`
	} `json:"limit_headers"`
	Error *struct {
		Field, Message string
	} `json:"error"`
}

func httpCheck(t *testing.T, c *clustertest.Cluster, i int, body string) (int, httpAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+c.Nodes[i].HTTP+"/v1/limit/check", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token("app"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a httpAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %d %q: %v", resp.StatusCode, b, err)
	}
	return resp.StatusCode, a
}

func httpDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func subject(tenant, tier, ip, route string) string {
	return fmt.Sprintf(`{"request_id":"r","subject":{"tenant_id":%q,"tenant_tier":%q,"ip":%q},"resource":{"route":%q,"method":"GET"}}`, tenant, tier, ip, route)
}

func descCheck(t *testing.T, c *clustertest.Cluster, i int, d *pb.Descriptors) *pb.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := c.Client(i).Check(ctx, &pb.CheckRequest{Descriptors: d})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestPolicies: policies applied through one node decide checks on every
// node, over gRPC and HTTP, as the resolution rules say.
func TestPolicies(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := adminClient(t, c, 1, "operator")
	applied, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: testPolicies, SourceName: "test.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied.GetAdded()) != 9 || applied.GetVersion() == 0 || !applied.GetApplied() {
		t.Fatalf("apply: %v", applied)
	}
	v := applied.GetVersion()
	awaitVersion(t, c, v, 5*time.Second)

	t.Run("plan", func(t *testing.T) {
		for n := range 7 {
			code, a := httpCheck(t, c, n%3, subject("t_a", "FREE", "192.0.2.1", "/v1/x"))
			want := "ALLOW"
			if n >= 5 {
				want = "DENY"
			}
			if code != 200 || a.Decision != want || a.AppliedPolicyID != "free_plan" || a.PolicyVersion < v {
				t.Fatalf("check %d at n%d: %d %+v; want %s by free_plan", n+1, n%3+1, code, a, want)
			}
			if n >= 5 && (a.Reason != "WINDOW_FULL" || a.RetryAfterMS <= 0 || a.LimitHeaders.Limit != "5") {
				t.Errorf("denial %d: %+v; want WINDOW_FULL, a retry-after and limit 5", n+1, a)
			}
		}
	})
	t.Run("override beats plan", func(t *testing.T) {
		for n := range 7 {
			resp := descCheck(t, c, n%3, &pb.Descriptors{TenantId: "t_big", TenantTier: "FREE"})
			if resp.GetDecision() != pb.Decision_DECISION_ALLOW || resp.GetAppliedPolicyId() != "big_override" || len(resp.GetPolicies()) != 1 {
				t.Fatalf("check %d: %v; want allowed by big_override alone", n+1, resp)
			}
		}
	})
	t.Run("tightest denies and denial consumes nothing", func(t *testing.T) {
		d := &pb.Descriptors{TenantId: "t_c", TenantTier: "FREE", Ip: "10.1.2.3"}
		for n := range 3 {
			if r := descCheck(t, c, n%3, d); r.GetDecision() != pb.Decision_DECISION_ALLOW {
				t.Fatalf("check %d: %v", n+1, r)
			}
		}
		r := descCheck(t, c, 0, d)
		if r.GetDecision() != pb.Decision_DECISION_DENY || r.GetAppliedPolicyId() != "ip_safety" || len(r.GetPolicies()) != 2 {
			t.Fatalf("4th check: %v; want denied by ip_safety, with free_plan evaluated", r)
		}
		// The plan's bucket gave back its unit: 3 of 5 used, so two more
		// from an address no IP policy covers.
		other := &pb.Descriptors{TenantId: "t_c", TenantTier: "FREE", Ip: "192.0.2.9"}
		for n, want := range []pb.Decision{pb.Decision_DECISION_ALLOW, pb.Decision_DECISION_ALLOW, pb.Decision_DECISION_DENY} {
			if r := descCheck(t, c, 2, other); r.GetDecision() != want {
				t.Fatalf("plan check %d after the denial: %v; want %v (a denied request must consume nothing)", n+1, r, want)
			}
		}
	})
	t.Run("shadow and soft never deny", func(t *testing.T) {
		before := c.Metric(1, "quorate_policy_decisions_total", `policy="shadow_route"`, `outcome="shadow_would_deny"`)
		for _, tt := range []struct{ route, reason, policy string }{
			{"/v1/shadow", "SHADOW_WOULD_DENY", "shadow_route"},
			{"/v1/soft", "OVER_LIMIT_SOFT", "soft_route"},
		} {
			for n := range 3 {
				code, a := httpCheck(t, c, 1, subject("t_s", "", "", tt.route))
				if code != 200 || a.Decision != "ALLOW" {
					t.Fatalf("%s check %d: %d %+v; want allowed", tt.route, n+1, code, a)
				}
				if n > 0 && a.Reason != tt.reason {
					t.Errorf("%s check %d: reason %s; want %s", tt.route, n+1, a.Reason, tt.reason)
				}
			}
		}
		if got := c.Metric(1, "quorate_policy_decisions_total", `policy="shadow_route"`, `outcome="shadow_would_deny"`); got-before != 2 {
			t.Errorf("shadow_would_deny counted %v times on n2; want 2", got-before)
		}
	})
	t.Run("explain", func(t *testing.T) {
		ex, err := adminClient(t, c, 2, "prometheus").Explain(ctx, &pb.ExplainRequest{Descriptors: &pb.Descriptors{TenantId: "t_big", TenantTier: "FREE"}})
		if err != nil {
			t.Fatal(err)
		}
		why := map[string]bool{}
		for _, m := range ex.GetMatches() {
			why[m.GetPolicyId()] = m.GetSelected()
		}
		if sel, ok := why["big_override"]; !ok || !sel {
			t.Errorf("explain: big_override not selected: %v", ex)
		}
		if sel, ok := why["free_plan"]; !ok || sel {
			t.Errorf("explain: free_plan should match and lose to the override: %v", ex)
		}
		if ex.GetDecision().GetDecision() != pb.Decision_DECISION_ALLOW || !ex.GetDecision().GetDryRun() {
			t.Errorf("explain's decision: %v", ex.GetDecision())
		}
	})
	t.Run("dry run consumes nothing", func(t *testing.T) {
		d := &pb.Descriptors{TenantId: "t_dry", TenantTier: "FREE"}
		for n := range 8 {
			r, err := c.Client(n%3).Check(ctx, &pb.CheckRequest{Descriptors: d, DryRun: true})
			if err != nil || r.GetDecision() != pb.Decision_DECISION_ALLOW || !r.GetDryRun() {
				t.Fatalf("dry run %d: %v %v", n+1, r, err)
			}
		}
		for n := range 6 {
			if r := descCheck(t, c, n%3, d); (n < 5) != (r.GetDecision() == pb.Decision_DECISION_ALLOW) {
				t.Fatalf("check %d after 8 dry runs: %v; want 5 allowed", n+1, r)
			}
		}
	})
	t.Run("leased policy", func(t *testing.T) {
		var allowed int
		// The policy's consistency decides: the request names no mode.
		for n := range 12 {
			r, err := c.Client(n%3).Check(ctx, &pb.CheckRequest{Descriptors: &pb.Descriptors{TenantId: "t_l", TenantTier: "LEASED"}})
			if err != nil {
				t.Fatal(err)
			}
			if r.GetDecision() == pb.Decision_DECISION_ALLOW {
				allowed++
				if r.GetResults()[0].GetIndex() != 0 {
					t.Fatalf("check %d without a mode: %v; want it decided from the lease (no log index)", n+1, r)
				}
			}
		}
		if allowed == 0 || allowed > 5 {
			t.Errorf("leased checks allowed %d of 12 under 5/24h; want 1..5 (never over)", allowed)
		}
		// A strict request on a leased policy is decided strictly.
		r, err := c.Client(0).Check(ctx, &pb.CheckRequest{Mode: pb.Mode_MODE_STRICT, Descriptors: &pb.Descriptors{TenantId: "t_l2", TenantTier: "LEASED"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetDecision() != pb.Decision_DECISION_ALLOW || r.GetResults()[0].GetIndex() == 0 {
			t.Errorf("strict check on a leased policy: %v; want a decision from the log", r)
		}
	})
	t.Run("quota tree all or nothing", func(t *testing.T) {
		key := func(k string) *pb.Descriptors {
			return &pb.Descriptors{TenantId: "t_t", TenantTier: "TREE", ApiKeyId: k}
		}
		for n, tt := range []struct {
			key   string
			allow bool
		}{{"k1", true}, {"k1", true}, {"k1", false}, {"k2", true}, {"k2", true}, {"k3", false}} {
			r := descCheck(t, c, n%3, key(tt.key))
			if (r.GetDecision() == pb.Decision_DECISION_ALLOW) != tt.allow || len(r.GetResults()) != 2 {
				t.Fatalf("check %d (%s): %v; want allow=%v over two levels", n+1, tt.key, r, tt.allow)
			}
		}
		// k3 was denied at the tenant level: its own level kept its budget.
		ex, err := admin.Explain(ctx, &pb.ExplainRequest{Descriptors: key("k3")})
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range ex.GetDecision().GetResults() {
			if res.GetLevel() == "API_KEY" && res.GetRemaining() < 1 {
				t.Errorf("k3's API_KEY level: %v; want its budget untouched by the denied request", res)
			}
		}
	})
	t.Run("idempotent retries consume once", func(t *testing.T) {
		retry := &pb.Descriptors{TenantId: "t_i", TenantTier: "IDEM", ApiKeyId: "k", Route: "/pay", IdempotencyKey: "order-1"}
		for n := range 4 {
			if r := descCheck(t, c, n%3, retry); r.GetDecision() != pb.Decision_DECISION_ALLOW {
				t.Fatalf("retry %d: %v", n+1, r)
			}
		}
		fresh := &pb.Descriptors{TenantId: "t_i", TenantTier: "IDEM", ApiKeyId: "k", Route: "/pay"}
		for n := range 3 {
			if r := descCheck(t, c, 0, fresh); (n < 2) != (r.GetDecision() == pb.Decision_DECISION_ALLOW) {
				t.Fatalf("check %d after four retries of one request: %v; want 2 more of 3 allowed", n+1, r)
			}
		}
	})
	t.Run("a replayed retry denied elsewhere keeps its charge", func(t *testing.T) {
		// The retry is replayed by idem_plan and denied by ip_safety on
		// another shard; the compensating refund must skip the replay, or
		// every retry would hand the first request's unit back.
		r, err := ring.New(3)
		if err != nil {
			t.Fatal(err)
		}
		tenant := ""
		for i := 0; tenant == ""; i++ {
			if k := fmt.Sprintf("t_rp%d", i); r.ShardFor(ring.BucketKey("idem_plan", k)) != r.ShardFor(ring.BucketKey("ip_safety", "10.9.9.9")) {
				tenant = k
			}
		}
		for range 3 { // ip_safety's 3/24h for 10.9.9.9
			descCheck(t, c, 0, &pb.Descriptors{Ip: "10.9.9.9"})
		}
		first := &pb.Descriptors{TenantId: tenant, TenantTier: "IDEM", ApiKeyId: "k", Route: "/pay", IdempotencyKey: "o1", Ip: "192.0.2.1"}
		if r := descCheck(t, c, 1, first); r.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("first: %v", r)
		}
		retry := proto.Clone(first).(*pb.Descriptors)
		retry.Ip = "10.9.9.9"
		for range 3 {
			if r := descCheck(t, c, 2, retry); r.GetDecision() != pb.Decision_DECISION_DENY || r.GetAppliedPolicyId() != "ip_safety" {
				t.Fatalf("retry from an exhausted address: %v; want denied by ip_safety", r)
			}
		}
		for n := range 3 {
			fresh := &pb.Descriptors{TenantId: tenant, TenantTier: "IDEM", ApiKeyId: "k", Route: "/pay", Ip: "192.0.2.1"}
			if r := descCheck(t, c, 0, fresh); (n < 2) != (r.GetDecision() == pb.Decision_DECISION_ALLOW) {
				t.Fatalf("fresh check %d: %v; want 2 of 3 allowed (the first request keeps its unit)", n+1, r)
			}
		}
	})
	t.Run("raised limit keeps its counts", func(t *testing.T) {
		d := &pb.Descriptors{TenantId: "t_r", TenantTier: "RAISE"}
		for n := range 6 {
			r := descCheck(t, c, n%3, d)
			if (n < 5) != (r.GetDecision() == pb.Decision_DECISION_ALLOW) {
				t.Fatalf("check %d under 5/24h: %v", n+1, r)
			}
		}
		raised := strings.Replace(testPolicies[strings.Index(testPolicies, "  - policy_id: raise_plan"):], "5/24h", "8/24h", 1)
		res, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: "policies:\n" + raised})
		if err != nil || len(res.GetChanged()) != 1 {
			t.Fatalf("raise: %v %v", res, err)
		}
		awaitVersion(t, c, res.GetVersion(), 5*time.Second)
		for n := range 4 {
			r := descCheck(t, c, n%3, d)
			if (n < 3) != (r.GetDecision() == pb.Decision_DECISION_ALLOW) {
				t.Fatalf("check %d after raising to 8: %v; want 3 more allowed (5 of 8 used), not a fresh budget", n+1, r)
			}
		}
	})
	t.Run("bad policies change nothing", func(t *testing.T) {
		st, err := admin.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ doc, want string }{
			{"policies:\n  - policy_id: x\n    algorithm: TOKEN_BUKET\n    config: { rate: 5/s }\n", "bad.yaml:3:"},
			{"policies:\n  - policy_id: x\n    algorithm: TOKEN_BUCKET\n    config: { rate: -5/s }\n", "bad.yaml:4:"},
			{"policies:\n  - policy_id: x\n    scope: { ip: 10.0.0.0/33 }\n    algorithm: TOKEN_BUCKET\n    config: { rate: 5/s }\n", "bad.yaml:3:"},
			{"policies:\n  - policy_id: x\n    key: [tenant]\n    algorithm: TOKEN_BUCKET\n    config: { rate: 5/s }\n", "tenant"},
			{"policies:\n  - policy_id: x\n   algorithm: [\n", "bad.yaml:"},
			{"policies:\n  - policy_id: free_plan2\n    scope: { tenant_tier: FREE }\n    key: [tenant_id]\n    algorithm: FIXED_WINDOW\n    config: { limit: 5/24h }\n", "free_plan"},
		} {
			_, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: tt.doc, SourceName: "bad.yaml"})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("apply %q: %v; want InvalidArgument mentioning %q", tt.doc, err, tt.want)
			}
		}
		after, err := admin.Status(ctx, &pb.StatusRequest{})
		if err != nil || after.GetPolicyVersion() != st.GetPolicyVersion() {
			t.Errorf("version %d after refused applies; want %d (%v)", after.GetPolicyVersion(), st.GetPolicyVersion(), err)
		}
	})
	t.Run("bad http bodies", func(t *testing.T) {
		for _, tt := range []struct{ body, field string }{
			{`{"subject":{"ip":"not-an-ip"}}`, "subject.ip"},
			{`{"subject":{"tenant_id":"t"},"context":{"risk_score":2}}`, "context.risk_score"},
			{`{"subject":{"tenant_id":7}}`, "subject.tenant_id"},
			{`{"subject":`, ""},
		} {
			code, a := httpCheck(t, c, 0, tt.body)
			if code != 400 || a.Error == nil || !strings.Contains(a.Error.Field+a.Error.Message, tt.field) {
				t.Errorf("POST %s: %d %+v; want 400 naming %q", tt.body, code, a.Error, tt.field)
			}
		}
	})
	t.Run("unknown http fields are ignored", func(t *testing.T) {
		// A gateway that sends more than the contract still gets decided.
		code, a := httpCheck(t, c, 0, `{"subject":{"tenant":"t"},"gateway_version":"2"}`)
		if code != 200 || a.Error != nil || a.Decision == "" {
			t.Errorf("unknown fields: %d %+v; want 200 with a decision", code, a)
		}
		if n := c.Metric(0, "quorate_http_unknown_fields_total"); n < 2 {
			t.Errorf("quorate_http_unknown_fields_total = %v on node 0, want >= 2", n)
		}
	})
	t.Run("emergency block on every node", func(t *testing.T) {
		blk, err := admin.Block(ctx, &pb.BlockRequest{Descriptors: map[string]string{"ip": "203.0.113.8"}, Duration: durationpb.New(10 * time.Minute), Reason: "test"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := range c.Nodes {
			// Polled every 5ms: how soon the block holds is reported.
			await.UntilEvery(t, 5*time.Second-time.Since(start), 5*time.Millisecond, func() error {
				code, a := httpCheck(t, c, i, subject("t_e", "", "203.0.113.8", "/v1/x"))
				if code == 200 && a.Decision == "DENY" && a.Reason == "EMERGENCY_BLOCK" && a.AppliedPolicyID == blk.GetBlockId() {
					return nil
				}
				return fmt.Errorf("n%d still answers %+v after the block", i+1, a)
			})
		}
		t.Logf("block %s in force on every node %v after it was acknowledged", blk.GetBlockId(), time.Since(start))
		if code, a := httpCheck(t, c, 2, subject("t_e", "", "203.0.113.9", "/v1/x")); a.Decision != "ALLOW" {
			t.Errorf("another address: %d %+v; want allowed", code, a)
		}
		if _, err := admin.Unblock(ctx, &pb.UnblockRequest{BlockId: blk.GetBlockId()}); err != nil {
			t.Fatal(err)
		}
		awaitDecision(t, c, subject("t_e", "", "203.0.113.8", "/v1/x"), "ALLOW", 5*time.Second)
	})
	t.Run("http admin", func(t *testing.T) {
		doc := "policy_id: http_put\nscope: { tenant_tier: HTTP }\nkey: [tenant_id]\nalgorithm: GCRA\nconfig: { rate: 10/s }\n"
		url := "http://" + c.Nodes[2].HTTP + "/v1/admin/policies/http_put"
		if code, _ := httpDo(t, http.MethodPut, url, c.Token("app"), doc); code != http.StatusForbidden {
			t.Errorf("PUT with a check token: %d; want 403", code)
		}
		code, body := httpDo(t, http.MethodPut, url, c.Token("operator"), doc)
		if code != http.StatusOK || !strings.Contains(body, `"added":["http_put"]`) {
			t.Fatalf("PUT: %d %s", code, body)
		}
		// Read your writes: the node that took the PUT answers with it.
		if code, body := httpDo(t, http.MethodGet, "http://"+c.Nodes[2].HTTP+"/v1/admin/policies", c.Token("prometheus"), ""); code != http.StatusOK || !strings.Contains(body, `"policy_id":"http_put"`) {
			t.Errorf("GET list with a read token: %d %s", code, body)
		}
		// Deleting through another node than the PUT's: the meta leader
		// decides whether the policy exists, not that node's copy; and
		// the same node (admin's, n2) reads its write back.
		if code, body := httpDo(t, http.MethodDelete, "http://"+c.Nodes[1].HTTP+"/v1/admin/policies/http_put", c.Token("operator"), ""); code != http.StatusOK || !strings.Contains(body, `"removed":["http_put"]`) {
			t.Errorf("DELETE: %d %s", code, body)
		}
		if _, err := admin.GetPolicy(ctx, &pb.GetPolicyRequest{PolicyId: "http_put"}); status.Code(err) != codes.NotFound {
			t.Errorf("GetPolicy after the DELETE: %v; want NotFound", err)
		}
	})
	t.Run("a restarted node decides with the current set", func(t *testing.T) {
		// Policies change rarely, so the meta group has no snapshot yet: a
		// restarted node holds no policies until its replica applies the
		// log, and must not decide descriptor checks before that.
		st, err := admin.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		c.Kill(2)
		c.Restart(2)
		var early int
		for !c.Running(2) || httpReady(c, 2) == false {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			r, err := c.Client(2).Check(cctx, &pb.CheckRequest{Descriptors: &pb.Descriptors{TenantId: "t_rs", TenantTier: "FREE"}})
			ccancel()
			if err == nil && r.GetPolicyVersion() < st.GetPolicyVersion() {
				t.Fatalf("n3 decided with policy version %d before catching up to %d: %v", r.GetPolicyVersion(), st.GetPolicyVersion(), r)
			}
			if status.Code(err) == codes.Unavailable {
				early++
			}
			// Checks all through the catch-up are what is under test.
			time.Sleep(20 * time.Millisecond)
		}
		c.WaitReady(30*time.Second, 2)
		if r := descCheck(t, c, 2, &pb.Descriptors{TenantId: "t_rs", TenantTier: "FREE"}); r.GetPolicyVersion() != st.GetPolicyVersion() || r.GetAppliedPolicyId() != "free_plan" {
			t.Errorf("after the restart n3 answers %v; want free_plan at version %d", r, st.GetPolicyVersion())
		}
		t.Logf("%d checks answered Unavailable while n3 caught up", early)
	})
	t.Run("admin needs an admin token", func(t *testing.T) {
		app := adminClient(t, c, 0, "app")
		if _, err := app.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: testPolicies}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("apply with a check token: %v; want PermissionDenied", err)
		}
		if !strings.Contains(c.Log(1), `msg="audit: policy change" node=n2 who=operator`) {
			t.Errorf("no audit line naming the operator for the policy change")
		}
	})
}

func httpReady(c *clustertest.Cluster, i int) bool {
	resp, err := http.Get("http://" + c.Nodes[i].HTTP + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func awaitVersion(t *testing.T, c *clustertest.Cluster, v uint64, within time.Duration) {
	t.Helper()
	start := time.Now()
	for i := range c.Nodes {
		// Polled every 2ms: callers report how soon a version is everywhere.
		await.UntilEvery(t, within-time.Since(start), 2*time.Millisecond, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := c.Client(i).Status(ctx)
			cancel()
			if err == nil && st.GetPolicyVersion() >= v {
				return nil
			}
			return fmt.Errorf("n%d at policy version %d (%v), not %d", i+1, st.GetPolicyVersion(), err, v)
		})
	}
}

func awaitDecision(t *testing.T, c *clustertest.Cluster, body, want string, within time.Duration) {
	t.Helper()
	start := time.Now()
	for i := range c.Nodes {
		await.UntilEvery(t, within-time.Since(start), 5*time.Millisecond, func() error {
			if _, a := httpCheck(t, c, i, body); a.Decision != want {
				return fmt.Errorf("n%d answers %s, not %s", i+1, a.Decision, want)
			}
			return nil
		})
	}
}

// TestPolicyChangeUnderTraffic: while every node decides descriptor
// checks, a policy change is acknowledged and then decides checks on every
// node; the time until the last node decides with it is reported.
func TestPolicyChangeUnderTraffic(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := adminClient(t, c, 0, "operator")
	doc := func(limit int) string {
		return fmt.Sprintf("policies:\n  - policy_id: live\n    key: [user_id]\n    algorithm: TOKEN_BUCKET\n    config: { rate: %d/s }\n", limit)
	}
	if _, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: doc(1000)}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var seen [3]atomic.Int64 // per node: the highest limit a check reported
	for w := range 12 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := c.Client(w%3).Check(cctx, &pb.CheckRequest{Descriptors: &pb.Descriptors{UserId: fmt.Sprintf("u%d", n%500)}})
				ccancel()
				if err == nil && len(resp.GetPolicies()) == 1 {
					seen[w%3].Store(resp.GetPolicies()[0].GetLimit())
				}
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	var worst time.Duration
	for round := range 5 {
		limit := 2000 + round
		res, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: doc(limit)})
		if err != nil {
			t.Fatal(err)
		}
		acked := time.Now()
		for i := range c.Nodes {
			// Polled every 1ms: the time until every node decides with it
			// is what is measured.
			await.UntilEvery(t, 10*time.Second-time.Since(acked), time.Millisecond, func() error {
				if got := seen[i].Load(); got != int64(limit) {
					return fmt.Errorf("round %d: n%d still decides with limit %d after version %d", round, i+1, got, res.GetVersion())
				}
				return nil
			})
		}
		worst = max(worst, time.Since(acked))
	}
	t.Logf("under traffic, a change decided checks on every node at most %v after it was acknowledged (5 changes)", worst)
}
