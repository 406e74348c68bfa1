package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func TestCheckRequestMapping(t *testing.T) {
	risk := 0.75
	zero := 0.0
	tests := []struct {
		name, body string
		want       *pb.CheckRequest
	}{
		{"empty object", `{}`, &pb.CheckRequest{Descriptors: &pb.Descriptors{}}},
		{"every field", `{"request_id": "r-1",
			"subject": {"tenant_id": "t_44", "api_key_id": "k_1", "user_id": "u_9", "ip": "203.0.113.8", "tenant_tier": "PRO"},
			"resource": {"route": "/v1/payments", "method": "POST", "service": "billing"},
			"context": {"region": "eu-west-1", "risk_score": 0.75, "idempotency_key": "idem-3"},
			"descriptors": {"plan_addon": "extra", "team": "a"},
			"cost": 3, "mode": "leased", "dry_run": true}`,
			&pb.CheckRequest{RequestId: "r-1", Mode: pb.Mode_MODE_LEASED, DryRun: true, Descriptors: &pb.Descriptors{
				TenantId: "t_44", ApiKeyId: "k_1", UserId: "u_9", Ip: "203.0.113.8", TenantTier: "PRO",
				Route: "/v1/payments", Method: "POST", Service: "billing",
				Region: "eu-west-1", RiskScore: &risk, IdempotencyKey: "idem-3",
				Custom: map[string]string{"plan_addon": "extra", "team": "a"}, Cost: 3,
			}}},
		{"strict", `{"mode": "strict"}`, &pb.CheckRequest{Mode: pb.Mode_MODE_STRICT, Descriptors: &pb.Descriptors{}}},
		{"mode in capitals", `{"mode": "LEASED"}`, &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Descriptors: &pb.Descriptors{}}},
		// A risk score of 0 is a score (trusted), not its absence.
		{"risk zero", `{"context": {"risk_score": 0}}`, &pb.CheckRequest{Descriptors: &pb.Descriptors{RiskScore: &zero}}},
		{"risk null", `{"context": {"risk_score": null}}`, &pb.CheckRequest{Descriptors: &pb.Descriptors{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeBackend{}
			w := serve(f, "POST", "/v1/limit/check", tt.body)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			method, got := f.lastCall()
			if req, ok := got.(*pb.CheckRequest); ok && tt.want.RequestId == "" {
				// Without one in the body or the headers, the node makes one.
				if len(req.GetRequestId()) != 32 {
					t.Errorf("request id %q, want a new 32-hex-digit one", req.GetRequestId())
				}
				req.RequestId = ""
			}
			if method != "Check" || !proto.Equal(got, tt.want) {
				t.Errorf("backend got %s(%v)\nwant Check(%v)", method, got, tt.want)
			}
		})
	}
}

// TestCheckIgnoresUnknownFields: a gateway that sends fields this version
// does not know gets its decision; the fields are counted.
func TestCheckIgnoresUnknownFields(t *testing.T) {
	f := &fakeBackend{}
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	Register(mux, f, reg)
	for _, body := range []string{`{"tenant_id": "t"}`, `{"subject": {"tenant_id": "t", "plan": "PRO"}, "context": {"risk": 0.5}}`} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("POST", "/v1/limit/check", strings.NewReader(body)))
		if w.Code != http.StatusOK {
			t.Errorf("%s: status %d %s, want 200", body, w.Code, w.Body)
		}
	}
	_, got := f.lastCall()
	if got.(*pb.CheckRequest).GetDescriptors().GetTenantId() != "t" {
		t.Errorf("known fields beside unknown ones were lost: %v", got)
	}
	if n := counterSum(t, reg, "quorate_http_unknown_fields_total"); n != 3 {
		t.Errorf("quorate_http_unknown_fields_total = %v, want 3", n)
	}
}

// counterSum sums a counter's series in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestCheckTraceHeaders: the request id is read from the header (or made),
// echoed and sent to the node; the decision and deciding policy are
// added; the subject's headers pass through.
func TestCheckTraceHeaders(t *testing.T) {
	f := &fakeBackend{resp: &pb.CheckResponse{Decision: deny, AppliedPolicyId: "plan_free",
		Policies: []*pb.PolicyResult{hard("plan_free", deny, pb.Reason_REASON_OVER_LIMIT, pb.Algorithm_ALGORITHM_TOKEN_BUCKET)}}}
	mux := http.NewServeMux()
	Register(mux, f, nil)
	r := httptest.NewRequest("POST", "/v1/limit/check", strings.NewReader(`{}`))
	r.Header.Set("X-Request-Id", "req-77")
	r.Header.Set("X-Tenant-Id", "t_1")
	r.Header.Set("X-Api-Key-Id", "k_1")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	want := map[string]string{"X-Request-Id": "req-77", "X-Rate-Limit-Decision": "DENY", "X-Policy-Id": "plan_free",
		"X-Tenant-Id": "t_1", "X-Api-Key-Id": "k_1"}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if _, got := f.lastCall(); got.(*pb.CheckRequest).GetRequestId() != "req-77" {
		t.Errorf("the node got request id %q, want req-77", got.(*pb.CheckRequest).GetRequestId())
	}
	// Without a header, a new id; a body's id wins over the header's.
	w = serve(f, "POST", "/v1/limit/check", `{}`)
	if id := w.Header().Get("X-Request-Id"); len(id) != 32 {
		t.Errorf("made request id %q, want 32 hex digits", id)
	}
	r = httptest.NewRequest("POST", "/v1/limit/check", strings.NewReader(`{"request_id": "body-1"}`))
	r.Header.Set("X-Request-Id", "hdr-1")
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if id := w.Header().Get("X-Request-Id"); id != "body-1" {
		t.Errorf("request id %q, want the body's", id)
	}
}

// TestCheckShapingDelay: a shaping bucket's wait is in the answer, for the
// request and for its policy.
func TestCheckShapingDelay(t *testing.T) {
	f := &fakeBackend{resp: &pb.CheckResponse{Decision: allow, AppliedPolicyId: "shape",
		Results: []*pb.ItemResult{
			{PolicyId: "shape", Decision: allow, Delay: d(250)},
			{PolicyId: "other", Decision: allow, Delay: d(0)},
		},
		Policies: []*pb.PolicyResult{hard("shape", allow, pb.Reason_REASON_WITHIN_LIMIT, pb.Algorithm_ALGORITHM_LEAKY_BUCKET_SHAPING),
			hard("other", allow, pb.Reason_REASON_WITHIN_LIMIT, pb.Algorithm_ALGORITHM_TOKEN_BUCKET)}}}
	w := serve(f, "POST", "/v1/limit/check", `{}`)
	var a checkAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if a.DelayMs != 250 || a.Policies[0].DelayMs != 250 || a.Policies[1].DelayMs != 0 {
		t.Errorf("delay %d, policies %+v; want 250 for the request and the shaping policy", a.DelayMs, a.Policies)
	}
}

func TestInternalPathIsTheSameCheck(t *testing.T) {
	f := &fakeBackend{}
	w := serve(f, "POST", "/internal/v1/limit/check", `{"subject": {"ip": "10.0.0.1"}}`)
	method, got := f.lastCall()
	if w.Code != http.StatusOK || method != "Check" || got.(*pb.CheckRequest).GetDescriptors().GetIp() != "10.0.0.1" {
		t.Errorf("status %d, backend got %s(%v)", w.Code, method, got)
	}
}

func d(ms int64) *durationpb.Duration { return durationpb.New(time.Duration(ms) * time.Millisecond) }

// hard is a HARD policy's result with the given reason and algorithm.
func hard(id string, dec pb.Decision, r pb.Reason, alg pb.Algorithm) *pb.PolicyResult {
	return &pb.PolicyResult{PolicyId: id, Mode: pb.PolicyMode_POLICY_MODE_HARD, Decision: dec, Reason: r,
		Algorithm: alg, Limit: 60, Remaining: 7, ResetAfter: d(1500), RetryAfter: d(2001), Layer: "TENANT"}
}

var (
	allow = pb.Decision_DECISION_ALLOW
	deny  = pb.Decision_DECISION_DENY
)

func TestCheckAnswerReasons(t *testing.T) {
	overLimit := func(alg pb.Algorithm) *pb.CheckResponse {
		return &pb.CheckResponse{Decision: deny, Reason: pb.Reason_REASON_OVER_LIMIT, AppliedPolicyId: "p",
			Policies: []*pb.PolicyResult{hard("p", deny, pb.Reason_REASON_OVER_LIMIT, alg)}}
	}
	one := func(dec pb.Decision, r pb.Reason) *pb.CheckResponse {
		return &pb.CheckResponse{Decision: dec, Reason: r, AppliedPolicyId: "p",
			Policies: []*pb.PolicyResult{hard("p", dec, r, pb.Algorithm_ALGORITHM_TOKEN_BUCKET)}}
	}
	tests := []struct {
		resp *pb.CheckResponse
		want string
	}{
		{one(allow, pb.Reason_REASON_WITHIN_LIMIT), "WITHIN_LIMIT"},
		{overLimit(pb.Algorithm_ALGORITHM_TOKEN_BUCKET), "TOKEN_BUCKET_EMPTY"},
		{overLimit(pb.Algorithm_ALGORITHM_GCRA), "TOKEN_BUCKET_EMPTY"},
		{overLimit(pb.Algorithm_ALGORITHM_FIXED_WINDOW), "WINDOW_FULL"},
		{overLimit(pb.Algorithm_ALGORITHM_SLIDING_WINDOW), "WINDOW_FULL"},
		{overLimit(pb.Algorithm_ALGORITHM_SLIDING_LOG), "WINDOW_FULL"},
		{overLimit(pb.Algorithm_ALGORITHM_LEAKY_BUCKET_POLICING), "BUCKET_FULL"},
		{overLimit(pb.Algorithm_ALGORITHM_LEAKY_BUCKET_SHAPING), "BUCKET_FULL"},
		{overLimit(pb.Algorithm_ALGORITHM_UNSPECIFIED), "OVER_LIMIT"},
		{&pb.CheckResponse{Decision: deny, Reason: pb.Reason_REASON_EMERGENCY_BLOCK, AppliedPolicyId: "blk_1"}, "EMERGENCY_BLOCK"},
		{one(allow, pb.Reason_REASON_OVER_LIMIT_SOFT), "OVER_LIMIT_SOFT"},
		{one(allow, pb.Reason_REASON_SHADOW_WOULD_DENY), "SHADOW_WOULD_DENY"},
		{one(allow, pb.Reason_REASON_FAIL_OPEN), "FAIL_OPEN"},
		{one(deny, pb.Reason_REASON_UNAVAILABLE), "STORE_UNAVAILABLE"},
		{&pb.CheckResponse{Decision: allow, Reason: pb.Reason_REASON_NO_POLICY}, "NO_MATCHING_POLICY"},
		// A refunded request reports why the policy that denied did.
		{&pb.CheckResponse{Decision: deny, Reason: pb.Reason_REASON_REFUNDED, AppliedPolicyId: "a", Policies: []*pb.PolicyResult{
			hard("a", deny, pb.Reason_REASON_REFUNDED, pb.Algorithm_ALGORITHM_TOKEN_BUCKET),
			hard("b", deny, pb.Reason_REASON_OVER_LIMIT, pb.Algorithm_ALGORITHM_SLIDING_WINDOW),
		}}, "WINDOW_FULL"},
		// Which bucket of the deciding policy ran out decides, not its
		// tightest bucket's algorithm.
		{&pb.CheckResponse{Decision: deny, Reason: pb.Reason_REASON_OVER_LIMIT, AppliedPolicyId: "p",
			Policies: []*pb.PolicyResult{hard("p", deny, pb.Reason_REASON_OVER_LIMIT, pb.Algorithm_ALGORITHM_TOKEN_BUCKET)},
			Results: []*pb.ItemResult{
				{PolicyId: "p", Level: "burst", Reason: pb.Reason_REASON_REFUNDED, Algorithm: pb.Algorithm_ALGORITHM_TOKEN_BUCKET},
				{PolicyId: "p", Level: "sustained", Reason: pb.Reason_REASON_OVER_LIMIT, Algorithm: pb.Algorithm_ALGORITHM_LEAKY_BUCKET_POLICING},
			}}, "BUCKET_FULL"},
	}
	for _, tt := range tests {
		a := answer("", tt.resp)
		if a.Reason != tt.want {
			t.Errorf("reason of %v = %q; want %q", tt.resp, a.Reason, tt.want)
		}
	}
}

func TestCheckAnswerJSONAndHeaders(t *testing.T) {
	resp := &pb.CheckResponse{
		Decision: deny, Reason: pb.Reason_REASON_OVER_LIMIT, AppliedPolicyId: "plan_pro",
		PolicyVersion: 12, DryRun: true,
		Policies: []*pb.PolicyResult{
			{PolicyId: "global", Mode: pb.PolicyMode_POLICY_MODE_HARD, Decision: allow, Reason: pb.Reason_REASON_WITHIN_LIMIT,
				Algorithm: pb.Algorithm_ALGORITHM_TOKEN_BUCKET, Limit: 1000, Remaining: 900, ResetAfter: d(100), Layer: "GLOBAL"},
			{PolicyId: "plan_pro", Mode: pb.PolicyMode_POLICY_MODE_HARD, Decision: deny, Reason: pb.Reason_REASON_OVER_LIMIT,
				Algorithm: pb.Algorithm_ALGORITHM_SLIDING_WINDOW, Limit: 3000, Remaining: 0, ResetAfter: d(59001), RetryAfter: d(1200), Layer: "TENANT"},
			{PolicyId: "try_new", Mode: pb.PolicyMode_POLICY_MODE_SHADOW, Decision: deny, Reason: pb.Reason_REASON_SHADOW_WOULD_DENY,
				Algorithm: pb.Algorithm_ALGORITHM_GCRA, Limit: 10, RetryAfter: d(1), Layer: "API_KEY"},
		},
	}
	f := &fakeBackend{resp: resp}
	w := serve(f, "POST", "/v1/limit/check", `{"request_id": "req-7", "dry_run": true}`)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	want := `{"request_id":"req-7","decision":"DENY","applied_policy_id":"plan_pro","remaining":0,` +
		`"reset_after_ms":59001,"retry_after_ms":1200,"delay_ms":0,"reason":"WINDOW_FULL",` +
		`"limit_headers":{"x-ratelimit-limit":"3000","x-ratelimit-remaining":"0","x-ratelimit-reset":"60"},` +
		`"policy_version":12,"dry_run":true,"policies":[` +
		`{"policy_id":"global","mode":"HARD","decision":"ALLOW","reason":"WITHIN_LIMIT","limit":1000,"remaining":900,"reset_after_ms":100,"retry_after_ms":0,"delay_ms":0,"layer":"GLOBAL"},` +
		`{"policy_id":"plan_pro","mode":"HARD","decision":"DENY","reason":"WINDOW_FULL","limit":3000,"remaining":0,"reset_after_ms":59001,"retry_after_ms":1200,"delay_ms":0,"layer":"TENANT"},` +
		`{"policy_id":"try_new","mode":"SHADOW","decision":"DENY","reason":"SHADOW_WOULD_DENY","limit":10,"remaining":0,"reset_after_ms":0,"retry_after_ms":1,"delay_ms":0,"layer":"API_KEY"}]}`
	if got := strings.TrimSpace(w.Body.String()); got != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	for h, v := range map[string]string{"RateLimit-Limit": "3000", "RateLimit-Remaining": "0", "RateLimit-Reset": "60",
		"Retry-After": "2", "Content-Type": "application/json"} {
		if got := w.Header().Get(h); got != v {
			t.Errorf("header %s = %q; want %q", h, got, v)
		}
	}
}

func TestCheckAnswerWithoutDecidingPolicy(t *testing.T) {
	for _, resp := range []*pb.CheckResponse{
		{Decision: allow, Reason: pb.Reason_REASON_NO_POLICY, PolicyVersion: 3},
		{Decision: deny, Reason: pb.Reason_REASON_EMERGENCY_BLOCK, AppliedPolicyId: "blk_9", PolicyVersion: 3},
	} {
		w := serve(&fakeBackend{resp: resp}, "POST", "/v1/limit/check", `{}`)
		var got map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got["remaining"] != 0.0 || got["retry_after_ms"] != 0.0 || len(got["limit_headers"].(map[string]any)) != 0 ||
			len(got["policies"].([]any)) != 0 {
			t.Errorf("%v: answer %s; want zero numbers, empty headers and policies", resp.GetReason(), w.Body)
		}
		for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"} {
			if v := w.Header().Get(h); v != "" {
				t.Errorf("%v: header %s = %q; want none", resp.GetReason(), h, v)
			}
		}
	}
}

func TestCeilDiv(t *testing.T) {
	tests := []struct {
		d    time.Duration
		unit time.Duration
		want int64
	}{
		{0, time.Second, 0},
		{-time.Second, time.Second, 0},
		{time.Nanosecond, time.Second, 1},
		{time.Second, time.Second, 1},
		{time.Second + time.Nanosecond, time.Second, 2},
		{1500 * time.Microsecond, time.Millisecond, 2},
	}
	for _, tt := range tests {
		if got := ceilDiv(tt.d, tt.unit); got != tt.want {
			t.Errorf("ceilDiv(%v, %v) = %d; want %d", tt.d, tt.unit, got, tt.want)
		}
	}
}

func TestCheckBadInput(t *testing.T) {
	tests := []struct {
		name, body string
		status     int
		field      string
		msg        string // in the message
	}{
		{"malformed", `{"subject": {"ip": "1.2.3.4",}}`, 400, "body", "byte offset 30"},
		{"truncated", `{"subject": {"ip": "1.2`, 400, "body", "ends at byte offset 23"},
		{"empty", ``, 400, "body", "empty"},
		{"array", `[1]`, 400, "body", "want a JSON object, got array"},
		{"trailing data", `{} {}`, 400, "body", "data after the object"},
		{"ip not a string", `{"subject": {"ip": 17}}`, 400, "subject.ip", "want a string, got number"},
		{"cost a string", `{"cost": "3"}`, 400, "cost", "want an integer, got string"},
		{"cost a fraction", `{"cost": 1.5}`, 400, "cost", "want an integer"},
		{"cost huge", `{"cost": 1e30}`, 400, "cost", "want an integer"},
		{"cost negative", `{"cost": -1}`, 400, "cost", "must not be negative"},
		{"risk a string", `{"context": {"risk_score": "high"}}`, 400, "context.risk_score", "want a number"},
		{"risk above 1", `{"context": {"risk_score": 1.5}}`, 400, "context.risk_score", "from 0 to 1"},
		{"risk below 0", `{"context": {"risk_score": -0.1}}`, 400, "context.risk_score", "from 0 to 1"},
		// encoding/json names a map, not its key.
		{"custom not a string", `{"descriptors": {"team": 1}}`, 400, "descriptors", "want a string, got number"},
		{"descriptors a list", `{"descriptors": ["a"]}`, 400, "descriptors", "want an object"},
		{"dry_run a string", `{"dry_run": "yes"}`, 400, "dry_run", "want true or false"},
		{"bad mode", `{"mode": "fast"}`, 400, "mode", `"fast": want strict or leased`},
		{"too large", `{"request_id": "` + strings.Repeat("x", MaxCheckBody) + `"}`, 413, "body", "larger than 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeBackend{}
			w := serve(f, "POST", "/v1/limit/check", tt.body)
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

func invalid(field, desc string) error {
	st, err := status.New(codes.InvalidArgument, field+": "+desc).WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}}})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestBackendErrors(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
		field  string
		msg    string
	}{
		{invalid("descriptors.ip", "not an IP address"), 400, "INVALID_ARGUMENT", "subject.ip", "subject.ip: not an IP address"},
		{invalid("descriptors.tenant_id", "longer than 256 bytes"), 400, "INVALID_ARGUMENT", "subject.tenant_id", "longer"},
		{invalid("descriptors.route", "control character"), 400, "INVALID_ARGUMENT", "resource.route", "control"},
		{invalid("descriptors.region", "x"), 400, "INVALID_ARGUMENT", "context.region", "x"},
		{invalid("descriptors.custom.team", "x"), 400, "INVALID_ARGUMENT", "descriptors.team", "x"},
		{invalid("descriptors.custom", "more than 32"), 400, "INVALID_ARGUMENT", "descriptors", "32"},
		{invalid("descriptors.cost", "over the bound"), 400, "INVALID_ARGUMENT", "cost", "bound"},
		{invalid("request_id", "too long"), 400, "INVALID_ARGUMENT", "request_id", "too long"},
		{status.Error(codes.InvalidArgument, "no detail"), 400, "INVALID_ARGUMENT", "", "no detail"},
		{status.Error(codes.Unauthenticated, "no token"), 401, "UNAUTHENTICATED", "", "no token"},
		{status.Error(codes.PermissionDenied, "needs admin"), 403, "PERMISSION_DENIED", "", "needs admin"},
		{status.Error(codes.NotFound, "no policy x"), 404, "NOT_FOUND", "", "no policy x"},
		{status.Error(codes.FailedPrecondition, "not ready"), 409, "FAILED_PRECONDITION", "", "not ready"},
		{status.Error(codes.ResourceExhausted, "queue full"), 429, "RESOURCE_EXHAUSTED", "", "queue full"},
		{status.Error(codes.Unavailable, "no leader"), 503, "UNAVAILABLE", "", "no leader"},
		{status.Error(codes.DeadlineExceeded, "late"), 504, "DEADLINE_EXCEEDED", "", "late"},
		{status.Error(codes.Internal, "bug"), 500, "INTERNAL", "", "bug"},
		{status.Error(codes.Unknown, "odd"), 500, "UNKNOWN", "", "odd"},
	}
	for _, tt := range tests {
		w := serve(&fakeBackend{err: tt.err}, "POST", "/v1/limit/check", `{}`)
		e := errorBody(t, w)
		if w.Code != tt.status || e.Code != tt.code || e.Field != tt.field || !strings.Contains(e.Message, tt.msg) {
			t.Errorf("%v: status %d, error %+v; want %d %s, field %q, message containing %q",
				tt.err, w.Code, e, tt.status, tt.code, tt.field, tt.msg)
		}
	}
}

func TestCheckOnlyPost(t *testing.T) {
	for _, p := range []string{"/v1/limit/check", "/internal/v1/limit/check"} {
		f := &fakeBackend{}
		w := serve(f, "GET", p, "")
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "POST" || errorBody(t, w).Code != "METHOD_NOT_ALLOWED" {
			t.Errorf("GET %s: status %d, Allow %q, body %s", p, w.Code, w.Header().Get("Allow"), w.Body)
		}
		if f.numCalls() != 0 {
			t.Errorf("GET %s called the backend", p)
		}
	}
}

// A soft policy over its limit allows: a caller must not be told to wait.
func TestNoRetryAfterOnAllow(t *testing.T) {
	resp := &pb.CheckResponse{Decision: allow, Reason: pb.Reason_REASON_OVER_LIMIT_SOFT, AppliedPolicyId: "p",
		Policies: []*pb.PolicyResult{hard("p", deny, pb.Reason_REASON_OVER_LIMIT_SOFT, pb.Algorithm_ALGORITHM_TOKEN_BUCKET)}}
	w := serve(&fakeBackend{resp: resp}, "POST", "/v1/limit/check", `{}`)
	if w.Header().Get("Retry-After") != "" || w.Header().Get("RateLimit-Remaining") != "7" {
		t.Errorf("headers %v; want RateLimit-Remaining 7 and no Retry-After", w.Header())
	}
}
