package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

const policyYAML = `policy_id: plan_pro
scope: { tenant_tier: PRO }
key: [tenant_id]
algorithm: TOKEN_BUCKET
config: { rate: 3000/min, capacity: 200 }
`

var changes = &pb.ApplyPoliciesResponse{Version: 8, Added: []string{"a"}, Changed: []string{"b"}, Diff: "+ a\n~ b: x 1 -> 2\n", Applied: true}

const changesJSON = `{"version":8,"added":["a"],"changed":["b"],"removed":[],"unchanged":[],"diff":"+ a\n~ b: x 1 -> 2\n","applied":true,"warnings":[]}`

// route is one admin request, what the backend must get, and the answer.
type route struct {
	name, method, target, body string
	access                     Access
	resp                       proto.Message // the backend's answer
	call                       string
	want                       proto.Message // what the backend must get
	answer                     string        // the HTTP body, exactly
}

var adminRoutes = []route{
	{"list", "GET", "/v1/admin/policies", "", ReadAccess,
		&pb.ListPoliciesResponse{Version: 4, Policies: []string{`{"policy_id":"a"}`, `{"policy_id":"b"}`}, Blocks: []string{`{"block_id":"blk_1"}`}, Extraction: `{"trusted_proxies":["10.0.0.0/8"]}`},
		"ListPolicies", &pb.ListPoliciesRequest{},
		`{"version":4,"policies":[{"policy_id":"a"},{"policy_id":"b"}],"blocks":[{"block_id":"blk_1"}],"extraction":{"trusted_proxies":["10.0.0.0/8"]}}`},
	{"list empty", "GET", "/v1/admin/policies", "", ReadAccess, &pb.ListPoliciesResponse{Version: 0},
		"ListPolicies", &pb.ListPoliciesRequest{}, `{"version":0,"policies":[],"blocks":[],"extraction":null}`},
	{"get", "GET", "/v1/admin/policies/plan_pro", "", ReadAccess,
		&pb.GetPolicyResponse{Json: `{"policy_id":"plan_pro","mode":"HARD"}`, Version: 4},
		"GetPolicy", &pb.GetPolicyRequest{PolicyId: "plan_pro"},
		`{"version":4,"policy":{"policy_id":"plan_pro","mode":"HARD"}}`},
	{"put yaml", "PUT", "/v1/admin/policies/plan_pro", policyYAML, AdminAccess, changes,
		"ApplyPolicies", &pb.ApplyPoliciesRequest{Document: policyYAML, SourceName: "body"}, changesJSON},
	{"put json dry run", "PUT", "/v1/admin/policies/plan_pro?dry_run=true", `{"policy_id": "plan_pro"}`, AdminAccess, changes,
		"ApplyPolicies", &pb.ApplyPoliciesRequest{Document: `{"policy_id": "plan_pro"}`, SourceName: "body", DryRun: true}, changesJSON},
	{"delete", "DELETE", "/v1/admin/policies/old_one", "", AdminAccess, changes,
		"DeletePolicies", &pb.DeletePoliciesRequest{PolicyIds: []string{"old_one"}}, changesJSON},
	{"delete dry run", "DELETE", "/v1/admin/policies/old_one?dry_run=1", "", AdminAccess, changes,
		"DeletePolicies", &pb.DeletePoliciesRequest{PolicyIds: []string{"old_one"}, DryRun: true}, changesJSON},
	{"apply", "POST", "/v1/admin/policies/apply", "policies: []\n", AdminAccess, changes,
		"ApplyPolicies", &pb.ApplyPoliciesRequest{Document: "policies: []\n", SourceName: "body"}, changesJSON},
	{"apply prune dry run", "POST", "/v1/admin/policies/apply?prune=true&dry_run=true", "policies: []\n", AdminAccess,
		&pb.ApplyPoliciesResponse{Version: 3, Removed: []string{"x"}, Diff: "- x\n", Warnings: []string{"policy y: can never decide"}},
		"ApplyPolicies", &pb.ApplyPoliciesRequest{Document: "policies: []\n", SourceName: "body", Prune: true, DryRun: true},
		`{"version":3,"added":[],"changed":[],"removed":["x"],"unchanged":[],"diff":"- x\n","applied":false,"warnings":["policy y: can never decide"]}`},
	{"block", "POST", "/v1/admin/blocks", `{"descriptors": {"ip": "203.0.113.8"}, "duration": "10m", "reason": "abuse"}`, AdminAccess,
		&pb.BlockResponse{BlockId: "blk_7", ExpiresAt: timestamppb.New(time.Date(2026, 12, 2, 1, 20, 0, 0, time.UTC)), Version: 9},
		"Block", &pb.BlockRequest{Descriptors: map[string]string{"ip": "203.0.113.8"}, Duration: durationpb.New(10 * time.Minute), Reason: "abuse"},
		`{"block_id":"blk_7","expires_at":"2026-12-02T01:20:00Z","version":9}`},
	{"unblock", "DELETE", "/v1/admin/blocks/blk_7", "", AdminAccess, changes,
		"Unblock", &pb.UnblockRequest{BlockId: "blk_7"}, changesJSON},
	{"explain", "POST", "/v1/admin/explain", `{"subject": {"tenant_id": "t_44"}, "resource": {"route": "/v1/x"}}`, ReadAccess,
		&pb.ExplainResponse{Version: 2, Matches: []*pb.PolicyMatch{{PolicyId: "plan_pro", Selected: true, Why: "best", Layer: "TENANT", LayerFrom: "inferred from key tenant_id", Kind: "PLAN", KindFrom: "written"}, {PolicyId: "global", Why: "disabled"}},
			Decision: &pb.CheckResponse{Decision: deny, Reason: pb.Reason_REASON_OVER_LIMIT, AppliedPolicyId: "plan_pro", PolicyVersion: 2, DryRun: true,
				Policies: []*pb.PolicyResult{hard("plan_pro", deny, pb.Reason_REASON_OVER_LIMIT, pb.Algorithm_ALGORITHM_GCRA)}}},
		"Explain", &pb.ExplainRequest{Descriptors: &pb.Descriptors{TenantId: "t_44", Route: "/v1/x"}},
		`{"version":2,"block_id":"","matches":[{"policy_id":"plan_pro","selected":true,"why":"best","layer":"TENANT","layer_from":"inferred from key tenant_id","kind":"PLAN","kind_from":"written"},` +
			`{"policy_id":"global","selected":false,"why":"disabled","layer":"","layer_from":"","kind":"","kind_from":""}],` +
			`"decision":{"request_id":"","decision":"DENY","applied_policy_id":"plan_pro","remaining":7,"reset_after_ms":1500,"retry_after_ms":2001,"delay_ms":0,` +
			`"reason":"TOKEN_BUCKET_EMPTY","limit_headers":{"x-ratelimit-limit":"60","x-ratelimit-remaining":"7","x-ratelimit-reset":"2"},"policy_version":2,"dry_run":true,` +
			`"policies":[{"policy_id":"plan_pro","mode":"HARD","decision":"DENY","reason":"TOKEN_BUCKET_EMPTY","limit":60,"remaining":7,"reset_after_ms":1500,"retry_after_ms":2001,"delay_ms":0,"layer":"TENANT"}]}}`},
	{"top", "GET", "/v1/admin/top?policy=plan_free&by=hits&window=1m&limit=3", "", ReadAccess,
		&pb.TopKeysResponse{Keys: []*pb.TopKey{{Policy: "plan_free", Key: "t_1", Count: 40, Error: 2}}, Unreachable: []string{"n3"}},
		"TopKeys", &pb.TopKeysRequest{Policy: "plan_free", By: "hits", Window: durationpb.New(time.Minute), Limit: 3},
		`{"keys":[{"policy":"plan_free","key":"t_1","count":40,"error":2}],"unreachable":["n3"]}`},
	{"top defaults", "GET", "/v1/admin/top", "", ReadAccess, &pb.TopKeysResponse{},
		"TopKeys", &pb.TopKeysRequest{}, `{"keys":[]}`},
	{"explain blocked", "POST", "/v1/admin/explain", `{"subject": {"ip": "203.0.113.8"}}`, ReadAccess,
		&pb.ExplainResponse{Version: 3, BlockId: "blk_1"},
		"Explain", &pb.ExplainRequest{Descriptors: &pb.Descriptors{Ip: "203.0.113.8"}},
		`{"version":3,"block_id":"blk_1","matches":[],"decision":null}`},
	{"history", "GET", "/v1/admin/policies/history?limit=2", "", ReadAccess, historyResp,
		"PolicyHistory", &pb.PolicyHistoryRequest{Limit: 2}, historyJSON},
	{"diff", "GET", "/v1/admin/policies/history/diff?from=1&to=2", "", ReadAccess,
		&pb.PolicyDiffResponse{From: 1, To: 2, Changed: &pb.PolicyIDs{Count: 1, Ids: []string{"x"}}, Diff: "~ x: config.limit 5/24h -> 50/24h\n"},
		"PolicyDiff", &pb.PolicyDiffRequest{From: 1, To: 2},
		`{"from":1,"to":2,"added":{"count":0,"ids":[]},"changed":{"count":1,"ids":["x"]},"removed":{"count":0,"ids":[]},"extraction":false,"diff":"~ x: config.limit 5/24h -> 50/24h\n"}`},
	{"diff to current", "GET", "/v1/admin/policies/history/diff?from=1", "", ReadAccess, &pb.PolicyDiffResponse{From: 1, To: 3},
		"PolicyDiff", &pb.PolicyDiffRequest{From: 1},
		`{"from":1,"to":3,"added":{"count":0,"ids":[]},"changed":{"count":0,"ids":[]},"removed":{"count":0,"ids":[]},"extraction":false,"diff":""}`},
	{"rollback", "POST", "/v1/admin/policies/rollback", `{"to": 1}`, AdminAccess, changes,
		"RollbackPolicies", &pb.RollbackPoliciesRequest{To: 1}, changesJSON},
	{"rollback dry run", "POST", "/v1/admin/policies/rollback?dry_run=true", `{"to": 1}`, AdminAccess, changes,
		"RollbackPolicies", &pb.RollbackPoliciesRequest{To: 1, DryRun: true}, changesJSON},
}

var historyResp = &pb.PolicyHistoryResponse{Version: 3, FellOff: 1, Dropped: 1, MaxVersions: 100, MaxChanges: 500000,
	Versions: []*pb.PolicyVersion{
		{Version: 3, Time: timestamppb.New(time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC)), Who: "operator", Op: "rollback", RollbackTo: 2,
			Changed: &pb.PolicyIDs{Count: 1, Ids: []string{"x"}}},
		{Version: 2, Op: "baseline"},
	}}

const historyJSON = `{"version":3,"versions":[` +
	`{"version":3,"time":"2026-12-02T01:02:03Z","who":"operator","op":"rollback","source":"","rollback_to":2,"added":{"count":0,"ids":[]},` +
	`"changed":{"count":1,"ids":["x"]},"removed":{"count":0,"ids":[]},"extraction":false,"blocks":[]},` +
	`{"version":2,"time":null,"who":"","op":"baseline","source":"","rollback_to":0,"added":{"count":0,"ids":[]},` +
	`"changed":{"count":0,"ids":[]},"removed":{"count":0,"ids":[]},"extraction":false,"blocks":[]}],` +
	`"fell_off":1,"dropped":1,"max_versions":100,"max_changes":500000}`

func TestAdminRoutes(t *testing.T) {
	for _, rt := range adminRoutes {
		t.Run(rt.name, func(t *testing.T) {
			f := &fakeBackend{resp: rt.resp}
			w := serve(f, rt.method, rt.target, rt.body)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			method, got := f.lastCall()
			if method != rt.call || !proto.Equal(got, rt.want) {
				t.Errorf("backend got %s(%v)\nwant %s(%v)", method, got, rt.call, rt.want)
			}
			if got := compact(w.Body.String()); got != rt.answer {
				t.Errorf("answer\n%s\nwant\n%s", got, rt.answer)
			}
		})
	}
}

// compact drops the whitespace protojson adds at random.
func compact(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

// TestGuardOnEveryRoute: a Guard that refuses turns every route into 401
// before the backend is called, and each route asks for its access.
func TestGuardOnEveryRoute(t *testing.T) {
	routes := append([]route{
		{name: "check", method: "POST", target: "/v1/limit/check", body: `{}`, access: CheckAccess},
		{name: "internal check", method: "POST", target: "/internal/v1/limit/check", body: `{}`, access: CheckAccess},
	}, adminRoutes...)
	for _, rt := range routes {
		f := &fakeBackend{refuse: true}
		w := serve(f, rt.method, rt.target, rt.body)
		if w.Code != http.StatusUnauthorized || f.numCalls() != 0 {
			t.Errorf("%s %s: status %d, %d backend calls; want 401 and none", rt.method, rt.target, w.Code, f.numCalls())
		}
		if got := w.Header().Get("X-Test-Access"); got != rt.access.String() {
			t.Errorf("%s %s: guarded for %q; want %q", rt.method, rt.target, got, rt.access)
		}
	}
}

func TestAdminBadInput(t *testing.T) {
	tests := []struct {
		name, method, target, body string
		status                     int
		field, msg                 string
	}{
		{"put another id", "PUT", "/v1/admin/policies/plan_pro", "policy_id: plan_free\n", 400, "policy_id", `"plan_free" (line 1) is not the policy the path names, "plan_pro"`},
		{"put without id", "PUT", "/v1/admin/policies/plan_pro", "scope: {}\n", 400, "policy_id", "required"},
		{"put a list", "PUT", "/v1/admin/policies/plan_pro", "- policy_id: plan_pro\n", 400, "body", "one policy object"},
		{"put a document", "PUT", "/v1/admin/policies/plan_pro", "policies:\n  - policy_id: plan_pro\n", 400, "policy_id", "required"},
		{"put bad yaml", "PUT", "/v1/admin/policies/plan_pro", "policy_id: [\n", 400, "body", "line"},
		{"put unknown query", "PUT", "/v1/admin/policies/plan_pro?prune=true", policyYAML, 400, "prune", "unknown query parameter (this route takes dry_run)"},
		{"apply misspelt prune", "POST", "/v1/admin/policies/apply?prnue=true", "policies: []", 400, "prnue", "unknown query parameter"},
		{"apply bad bool", "POST", "/v1/admin/policies/apply?prune=yes", "policies: []", 400, "prune", `"yes": want true or false`},
		{"apply too large", "POST", "/v1/admin/policies/apply", strings.Repeat("#", MaxDocumentBody+1), 413, "body", "larger than 4194304 bytes"},
		{"delete bad bool", "DELETE", "/v1/admin/policies/x?dry_run=maybe", "", 400, "dry_run", "want true or false"},
		{"block without descriptors", "POST", "/v1/admin/blocks", `{"duration": "10m"}`, 400, "descriptors", "required"},
		{"block without duration", "POST", "/v1/admin/blocks", `{"descriptors": {"ip": "1.2.3.4"}}`, 400, "duration", "required"},
		{"block bad duration", "POST", "/v1/admin/blocks", `{"descriptors": {"ip": "1.2.3.4"}, "duration": "10 minutes"}`, 400, "duration", "positive duration"},
		{"block negative duration", "POST", "/v1/admin/blocks", `{"descriptors": {"ip": "1.2.3.4"}, "duration": "-1m"}`, 400, "duration", "positive duration"},
		{"block unknown field", "POST", "/v1/admin/blocks", `{"descriptors": {"ip": "1.2.3.4"}, "duration": "1m", "for": "1m"}`, 400, "for", "unknown field"},
		{"top bad window", "GET", "/v1/admin/top?window=5", "", 400, "window", `"5": want a duration`},
		{"top bad limit", "GET", "/v1/admin/top?limit=ten", "", 400, "limit", "want a number"},
		{"top unknown query", "GET", "/v1/admin/top?polciy=x", "", 400, "polciy", "unknown query parameter"},
		{"explain bad risk", "POST", "/v1/admin/explain", `{"context": {"risk_score": 2}}`, 400, "context.risk_score", "from 0 to 1"},
		{"history bad limit", "GET", "/v1/admin/policies/history?limit=-1", "", 400, "limit", `"-1": want a whole number`},
		{"history unknown query", "GET", "/v1/admin/policies/history?since=3", "", 400, "since", "unknown query parameter (this route takes limit)"},
		{"diff without from", "GET", "/v1/admin/policies/history/diff?to=2", "", 400, "from", "required"},
		{"diff bad to", "GET", "/v1/admin/policies/history/diff?from=1&to=v2", "", 400, "to", `"v2": want a whole number`},
		{"rollback without to", "POST", "/v1/admin/policies/rollback", `{}`, 400, "to", "required"},
		{"rollback to 0", "POST", "/v1/admin/policies/rollback", `{"to": 0}`, 400, "to", "required"},
		{"rollback to a string", "POST", "/v1/admin/policies/rollback", `{"to": "3"}`, 400, "to", "want"},
		{"rollback unknown field", "POST", "/v1/admin/policies/rollback", `{"version": 3}`, 400, "version", "unknown field"},
		{"rollback empty body", "POST", "/v1/admin/policies/rollback", ``, 400, "body", "empty"},
		{"rollback bad dry run", "POST", "/v1/admin/policies/rollback?dry_run=please", `{"to": 1}`, 400, "dry_run", "want true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeBackend{}
			w := serve(f, tt.method, tt.target, tt.body)
			e := errorBody(t, w)
			if w.Code != tt.status || e.Field != tt.field || !strings.Contains(e.Message, tt.msg) {
				t.Errorf("status %d, error %+v; want %d, field %q, message containing %q", w.Code, e, tt.status, tt.field, tt.msg)
			}
			if f.numCalls() != 0 {
				t.Errorf("the backend was called")
			}
		})
	}
}

func TestAdminMethodNotAllowed(t *testing.T) {
	tests := []struct{ method, target, allow string }{
		{"POST", "/v1/admin/policies", "GET"},
		{"POST", "/v1/admin/policies/x", "GET, PUT, DELETE"},
		{"GET", "/v1/admin/blocks", "POST"},
		{"GET", "/v1/admin/blocks/blk_1", "DELETE"},
		{"GET", "/v1/admin/explain", "POST"},
		{"POST", "/v1/admin/policies/history/diff", "GET"},
	}
	for _, tt := range tests {
		f := &fakeBackend{}
		w := serve(f, tt.method, tt.target, "")
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != tt.allow || f.numCalls() != 0 {
			t.Errorf("%s %s: status %d, Allow %q, %d calls; want 405, %q, none", tt.method, tt.target, w.Code, w.Header().Get("Allow"), f.numCalls(), tt.allow)
		}
	}
}

// A policy the backend hands over that is not JSON is a 500, not a broken
// answer.
func TestListPoliciesNotJSON(t *testing.T) {
	f := &fakeBackend{resp: &pb.ListPoliciesResponse{Policies: []string{`{"policy_id":`}}}
	w := serve(f, "GET", "/v1/admin/policies", "")
	if w.Code != http.StatusInternalServerError || errorBody(t, w).Code != "INTERNAL" {
		t.Errorf("status %d, body %s; want 500 INTERNAL", w.Code, w.Body)
	}
}
