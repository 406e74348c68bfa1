package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// policyNode is a node's policy side and nothing else (another call
// panics): its set, and changes computed as cluster.Node computes them.
type policyNode struct {
	Node
	st meta.PolicyState
}

var reviewT0 = time.Date(2026, 2, 22, 22, 10, 0, 0, time.UTC)

func (n *policyNode) PolicySet() meta.PolicyState { return n.st }

func (n *policyNode) Policies() (*policy.Snapshot, bool) {
	s, err := policy.CompileSet(n.st.Policies, nil, n.st.Version)
	if err != nil {
		panic(err)
	}
	return s, true
}

func (n *policyNode) ChangePolicies(_ context.Context, c *meta.Command, dryRun bool) (meta.Result, error) {
	next, ch, _, code, err := meta.NextPolicies(n.st.Policies, nil, c, reviewT0)
	if err != nil {
		return meta.Result{}, meta.Result{Err: err.Error(), Code: code}.Refusal()
	}
	res := meta.Result{Version: n.st.Version, Changes: ch, Diff: policy.Diff(n.st.Policies, next)}
	if !dryRun {
		n.st = meta.PolicyState{Version: n.st.Version + 1, Policies: next}
		res.Version = n.st.Version
	}
	return res, nil
}

// openBackend is the node's HTTP backend without the token check.
type openBackend struct{ backend }

func (openBackend) Guard(_ Access, h http.Handler) http.Handler { return h }

func reviewFrontend(t *testing.T, set string) (*policyNode, *admin, *http.ServeMux) {
	t.Helper()
	ps, err := policy.Parse("set.yaml", []byte(set))
	if err != nil {
		t.Fatal(err)
	}
	n := &policyNode{st: meta.PolicyState{Version: 3, Policies: policy.SetOf(ps)}}
	f := NewFrontend(n, Config{})
	a := &admin{f: f}
	mux := http.NewServeMux()
	Register(mux, openBackend{backend{f: f, AdminServer: a}}, nil)
	return n, a, mux
}

// guideExample is the guide's example policy as users paste it: no key.
const guideExample = `{ "policy_id": "policy_payments_post_tier2",
  "scope": { "tenant_tier": "PRO", "route": "/v1/payments", "method": "POST" },
  "algorithm": "TOKEN_BUCKET", "config": { "capacity": 200, "refill_per_sec": 50 },
  "mode": "HARD", "fail_behavior": "FAIL_CLOSED", "priority": 900, "enabled": true,
  "updated_at": "2026-02-22T22:10:00Z" }`

// TestApplyDryRunWarns: apply (dry run or not, gRPC or HTTP) answers the
// review's warnings beside the diff; a policy that would not do what it
// looks like is refused naming the fix, and nothing changes.
func TestApplyDryRunWarns(t *testing.T) {
	n, a, mux := reviewFrontend(t, `- { policy_id: plan_pro, scope: { tenant_tier: PRO }, key: [tenant_id], algorithm: GCRA, config: { rate: 100/s } }`)
	routeByTenant := `- { policy_id: payments, scope: { route: /v1/payments }, key: [tenant_id], algorithm: GCRA, config: { rate: 5/s } }`

	resp, err := a.ApplyPolicies(context.Background(), &pb.ApplyPoliciesRequest{Document: routeByTenant, SourceName: "p.yaml", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "policy payments: scoped by route, but its layer is TENANT, inferred from key tenant_id: policy plan_pro wins layer TENANT over it (PLAN beats ROUTE)"
	if len(resp.GetWarnings()) != 1 || !strings.HasPrefix(resp.GetWarnings()[0], want) || resp.GetApplied() || resp.GetDiff() != "+ payments\n" {
		t.Fatalf("dry run: warnings %q, applied %v, diff %q; want one warning %q..., not applied, + payments", resp.GetWarnings(), resp.GetApplied(), resp.GetDiff(), want)
	}

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("POST", "/v1/admin/policies/apply?dry_run=true", strings.NewReader(routeByTenant)))
	var body struct {
		Applied  bool     `json:"applied"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); w.Code != http.StatusOK || err != nil {
		t.Fatalf("HTTP dry run: %d %s", w.Code, w.Body)
	}
	if len(body.Warnings) != 1 || !strings.HasPrefix(body.Warnings[0], want) || body.Applied {
		t.Fatalf("HTTP dry run: %s, want the warning, not applied", w.Body)
	}

	// Applied, it warns the same; written with its layer, it warns of nothing.
	resp, err = a.ApplyPolicies(context.Background(), &pb.ApplyPoliciesRequest{Document: routeByTenant})
	if err != nil || len(resp.GetWarnings()) != 1 || !resp.GetApplied() {
		t.Fatalf("apply: %v, %v", resp, err)
	}
	resp, err = a.ApplyPolicies(context.Background(), &pb.ApplyPoliciesRequest{Document: strings.Replace(routeByTenant, "key:", "layer: ROUTE, key:", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetWarnings() != nil {
		t.Fatalf("layer: ROUTE written: warnings %q, want none", resp.GetWarnings())
	}

	// The guide's example pasted verbatim: refused, naming the fix.
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("POST", "/v1/admin/policies/apply?dry_run=true", strings.NewReader(guideExample)))
	e := errorBody(t, w)
	for _, s := range []string{"body:2:29: policy policy_payments_post_tier2: no key, and scope.tenant_tier matches many tenants: they would all share ONE bucket",
		"key: [tenant_id, api_key_id]", "shared: true"} {
		if w.Code != http.StatusBadRequest || e.Code != "INVALID_ARGUMENT" || !strings.Contains(e.Message, s) {
			t.Fatalf("the guide's example: %d %+v, want 400 INVALID_ARGUMENT with %q", w.Code, e, s)
		}
	}
	if v := n.st.Version; v != 5 {
		t.Errorf("version %d after a refusal, want 5", v)
	}
}
