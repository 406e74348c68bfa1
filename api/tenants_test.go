package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/tenants"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// fakeTenants records the tenant calls the HTTP routes make; the
// refuseCall-th SetTenants (from 1) is refused.
type fakeTenants struct {
	mu         sync.Mutex
	sets       []*pb.SetTenantsRequest
	last       any
	refuseCall int
}

func (f *fakeTenants) SetTenants(_ context.Context, req *pb.SetTenantsRequest) (*pb.SetTenantsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, req)
	if len(f.sets) == f.refuseCall {
		return nil, status.Error(codes.InvalidArgument, "the assignment would hold 10000001 tenants, more than the cluster's maximum of 10000000")
	}
	return &pb.SetTenantsResponse{Version: uint64(len(f.sets)), Tenants: 7, Set: uint32(len(req.GetAssignments()))}, nil
}

func (f *fakeTenants) DeleteTenants(_ context.Context, req *pb.DeleteTenantsRequest) (*pb.DeleteTenantsResponse, error) {
	f.last = req
	if req.GetTenantIds()[0] == "nobody" {
		return nil, status.Error(codes.NotFound, `tenant "nobody" has no plan assigned`)
	}
	return &pb.DeleteTenantsResponse{Version: 3, Tenants: 6, Deleted: 1}, nil
}

func (f *fakeTenants) GetTenant(_ context.Context, req *pb.GetTenantRequest) (*pb.GetTenantResponse, error) {
	f.last = req
	return &pb.GetTenantResponse{TenantId: req.GetTenantId(), Plan: "plan_pro", Tier: "PRO", Version: 4}, nil
}

func (f *fakeTenants) ListTenants(_ context.Context, req *pb.ListTenantsRequest) (*pb.ListTenantsResponse, error) {
	f.last = req
	return &pb.ListTenantsResponse{Version: 4, Tenants: 2, Plans: map[string]uint64{"PRO": 2},
		Assignments: []*pb.TenantAssignment{{TenantId: "t_1", Plan: "PRO"}}, Next: "t_1"}, nil
}

func (f *fakeTenants) Guard(a Access, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Test-Access", a.String())
		h.ServeHTTP(w, r)
	})
}

func serveTenants(f *fakeTenants, method, target, body string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	RegisterTenants(mux, f)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	return w
}

// TestTenantRoutes: each route makes its call with the access it needs
// and answers in the API's JSON.
func TestTenantRoutes(t *testing.T) {
	f := &fakeTenants{}
	for _, tc := range []struct {
		method, target, body string
		code                 int
		access, answer       string
	}{
		{"PUT", "/v1/admin/tenants/t_1", `{"plan":"PRO"}`, 200, "admin", `{"version":1,"tenants":7,"set":1,"unchanged":0}`},
		{"PUT", "/v1/admin/tenants/t_1", `{"tenant_id":"t_2","plan":"PRO"}`, 400, "admin", `"field":"tenant_id"`},
		{"PUT", "/v1/admin/tenants/t_1", `{"plan":"PRO","tier":"x"}`, 400, "admin", `"field":"tier"`},
		{"GET", "/v1/admin/tenants/t_1", "", 200, "read", `{"tenant_id":"t_1","plan":"plan_pro","tier":"PRO","version":4}`},
		{"DELETE", "/v1/admin/tenants/t_1", "", 200, "admin", `{"version":3,"tenants":6,"deleted":1}`},
		{"DELETE", "/v1/admin/tenants/nobody", "", 404, "admin", `"code":"NOT_FOUND"`},
		{"GET", "/v1/admin/tenants?after=t_0&limit=1&plan=PRO", "", 200, "read",
			`{"version":4,"tenants":2,"plans":{"PRO":2},"assignments":[{"tenant_id":"t_1","plan":"PRO"}],"next":"t_1"}`},
		{"GET", "/v1/admin/tenants?limt=1", "", 400, "read", `"field":"limt"`},
		{"PATCH", "/v1/admin/tenants/t_1", "", 405, "", `METHOD_NOT_ALLOWED`},
	} {
		w := serveTenants(f, tc.method, tc.target, tc.body)
		if w.Code != tc.code || w.Header().Get("X-Test-Access") != tc.access || !strings.Contains(w.Body.String(), tc.answer) {
			t.Errorf("%s %s: %d %s (access %q); want %d with %s (access %q)", tc.method, tc.target, w.Code, w.Body, w.Header().Get("X-Test-Access"), tc.code, tc.answer, tc.access)
		}
	}
	if req, ok := f.last.(*pb.ListTenantsRequest); !ok || req.GetAfter() != "t_0" || req.GetLimit() != 1 || req.GetPlan() != "PRO" {
		t.Errorf("list asked %v", f.last)
	}
	if got := f.sets[0].GetAssignments(); len(got) != 1 || got[0].GetTenantId() != "t_1" || got[0].GetPlan() != "PRO" {
		t.Errorf("PUT set %v", got)
	}
}

func ndjson(n int, bad int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		plan := "PRO"
		if i == bad {
			plan = ""
		}
		fmt.Fprintf(&b, "{\"tenant_id\":\"t_%d\",\"plan\":%q}\n", i, plan)
	}
	return b.String()
}

// TestTenantImport: a POSTed file is set a chunk of at most
// meta.MaxTenantChange at a time; a bad line stops it with the chunk it is
// in not sent, and a refused chunk stops it too, each saying which lines
// were applied.
func TestTenantImport(t *testing.T) {
	f := &fakeTenants{}
	w := serveTenants(f, "POST", "/v1/admin/tenants", ndjson(12_000, 0))
	if w.Code != 200 || w.Body.String() != `{"version":3,"tenants":7,"set":12000,"unchanged":0,"lines":12000,"chunks":3}`+"\n" {
		t.Fatalf("import: %d %s", w.Code, w.Body)
	}
	if n := []int{len(f.sets[0].GetAssignments()), len(f.sets[1].GetAssignments()), len(f.sets[2].GetAssignments())}; n[0] != 5000 || n[1] != 5000 || n[2] != 2000 {
		t.Errorf("chunks of %v", n)
	}
	if a := f.sets[2].GetAssignments()[1999]; a.GetTenantId() != "t_12000" {
		t.Errorf("the last assignment sent: %v", a)
	}

	f = &fakeTenants{}
	w = serveTenants(f, "POST", "/v1/admin/tenants", ndjson(12_000, 7001))
	e := errorBody(t, w)
	if w.Code != 400 || len(f.sets) != 1 || e.Field != "body" ||
		e.Message != "body: line 7001: tenants: plan: required; lines 1..5000 were applied in 1 chunks, none after" {
		t.Errorf("a bad line 7001: %d %+v after %d calls", w.Code, e, len(f.sets))
	}

	f = &fakeTenants{refuseCall: 2}
	w = serveTenants(f, "POST", "/v1/admin/tenants", ndjson(12_000, 0))
	e = errorBody(t, w)
	if w.Code != 400 || len(f.sets) != 2 || !strings.HasPrefix(e.Message, "lines 5001..10000: the assignment would hold") ||
		!strings.HasSuffix(e.Message, "; lines 1..5000 were applied in 1 chunks, none after") {
		t.Errorf("a refused second chunk: %d %+v after %d calls", w.Code, e, len(f.sets))
	}
	if w := serveTenants(&fakeTenants{}, "POST", "/v1/admin/tenants", "t_1,PRO\nt_2,\n"); w.Code != 400 || !strings.Contains(w.Body.String(), "line 2: tenants: plan: required; nothing was applied") {
		t.Errorf("CSV with a bad second line: %d %s", w.Code, w.Body)
	}
}

// tenantNode is the part of a Node the tenant calls use.
type tenantNode struct {
	Node
	got   *meta.Command
	table *tenants.Table
	snap  *policy.Snapshot
}

func (n *tenantNode) ChangeTenants(_ context.Context, c *meta.Command) (meta.TenantResult, error) {
	n.got = c
	return meta.TenantResult{Version: 9, Tenants: 1, Missing: len(c.IDs)}, nil
}
func (n *tenantNode) Tenants() *tenants.Table            { return n.table }
func (n *tenantNode) Policies() (*policy.Snapshot, bool) { return n.snap, true }

// TestTenantCalls: the Admin calls refuse a bad change naming the field
// before the node sees it, say NOT_FOUND for one tenant without a plan,
// and answer a tenant's tier as the policy set reads its plan.
func TestTenantCalls(t *testing.T) {
	snap, err := policy.Compile(mustPolicies(t, "policies:\n  - { policy_id: plan_pro, scope: { tenant_tier: PRO }, key: [tenant_id], algorithm: GCRA, config: { rate: 1/s } }\n"), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	table, _ := (*tenants.Table)(nil).Set([]tenants.Assignment{{TenantID: "t_1", Plan: "plan_pro"}})
	n := &tenantNode{table: table, snap: snap}
	a := &admin{f: NewFrontend(n, Config{Audit: slog.New(slog.DiscardHandler)})}
	ctx := security.WithPrincipal(context.Background(), security.Principal{Name: "ops"})
	field := func(err error) string {
		if v := violation(status.Convert(err)); v != nil {
			return v.GetField()
		}
		return status.Convert(err).Message()
	}
	_, err = a.SetTenants(ctx, &pb.SetTenantsRequest{Assignments: []*pb.TenantAssignment{{TenantId: "t_1", Plan: "PRO"}, {TenantId: "t_2"}}})
	if status.Code(err) != codes.InvalidArgument || field(err) != "assignments[1].plan" || n.got != nil {
		t.Errorf("a missing plan: %v (field %s); the node saw %v", err, field(err), n.got)
	}
	_, err = a.SetTenants(ctx, &pb.SetTenantsRequest{Assignments: make([]*pb.TenantAssignment, meta.MaxTenantChange+1)})
	if status.Code(err) != codes.InvalidArgument || field(err) != "assignments" {
		t.Errorf("too many: %v", err)
	}
	if _, err := a.SetTenants(ctx, &pb.SetTenantsRequest{Assignments: []*pb.TenantAssignment{{TenantId: "t_1", Plan: "PRO"}}}); err != nil || n.got.Op != meta.OpTenantSet || n.got.Who != "ops" {
		t.Errorf("a set: %v, the node got %+v", err, n.got)
	}
	if _, err := a.DeleteTenants(ctx, &pb.DeleteTenantsRequest{TenantIds: []string{"t_9"}}); status.Code(err) != codes.NotFound {
		t.Errorf("deleting one tenant without a plan: %v", err)
	}
	got, err := a.GetTenant(ctx, &pb.GetTenantRequest{TenantId: "t_1"})
	if err != nil || got.GetPlan() != "plan_pro" || got.GetTier() != "PRO" || got.GetVersion() != 1 {
		t.Errorf("get t_1: %v %v", got, err)
	}
	if _, err := a.GetTenant(ctx, &pb.GetTenantRequest{TenantId: "t_2"}); status.Code(err) != codes.NotFound {
		t.Errorf("get t_2: %v", err)
	}
	if _, err := a.ListTenants(ctx, &pb.ListTenantsRequest{Limit: maxTenantPage + 1}); field(err) != "limit" {
		t.Errorf("a page too large: %v", err)
	}
	list, err := a.ListTenants(ctx, &pb.ListTenantsRequest{})
	if err != nil || len(list.GetAssignments()) != 1 || list.GetNext() != "" || list.GetPlans()["plan_pro"] != 1 {
		t.Errorf("list: %v %v", list, err)
	}
	b, _ := json.Marshal(explainAnswerOf(&pb.ExplainResponse{Tier: "tenant_tier PRO from the tenant assignment"}))
	if !strings.Contains(string(b), `"tier":"tenant_tier PRO from the tenant assignment"`) {
		t.Errorf("explain's answer: %s", b)
	}
}

func mustPolicies(t *testing.T, doc string) []policy.Policy {
	t.Helper()
	ps, err := policy.Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
