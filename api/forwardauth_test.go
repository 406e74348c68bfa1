package api

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/policy/extract"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func forward(f *fakeBackend, method, target string, hdr map[string]string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	Register(mux, f, nil)
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "10.0.0.7:5000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

func decided(d pb.Decision, reason pb.Reason, retry time.Duration) *pb.CheckResponse {
	return &pb.CheckResponse{Decision: d, Reason: reason, AppliedPolicyId: "per_tenant",
		Policies: []*pb.PolicyResult{{PolicyId: "per_tenant", Decision: d, Reason: reason, Limit: 5, Remaining: 0,
			ResetAfter: durationpb.New(59*time.Second + time.Millisecond), RetryAfter: durationpb.New(retry),
			Algorithm: pb.Algorithm_ALGORITHM_FIXED_WINDOW}}}
}

func TestForwardAuthAllow(t *testing.T) {
	x, err := extract.Compile(&extract.Extraction{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBackend{resp: decided(pb.Decision_DECISION_ALLOW, pb.Reason_REASON_WITHIN_LIMIT, 0), extractor: x}
	w := forward(f, "PUT", "/v1/forward-auth", map[string]string{"X-Request-Id": "req-1", "X-Tenant-Id": "t_1",
		"X-Api-Key-Id": "k_1", "X-Forwarded-Uri": "/v1/pay?x=1", "X-Forwarded-Method": "post", "X-Forwarded-For": "203.0.113.8"})
	if w.Code != 200 || w.Body.Len() != 0 {
		t.Fatalf("allow: %d %q", w.Code, w.Body)
	}
	want := map[string]string{"X-Request-Id": "req-1", "X-Policy-Id": "per_tenant", "X-Rate-Limit-Decision": "ALLOW",
		"X-Tenant-Id": "t_1", "X-Api-Key-Id": "k_1", "Ratelimit-Policy": `"per_tenant";q=5`, "Ratelimit": `"per_tenant";r=0;t=60`,
		"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "60", "Retry-After": ""}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	_, last := f.lastCall()
	wantReq := &pb.CheckRequest{RequestId: "req-1", Descriptors: &pb.Descriptors{TenantId: "t_1", ApiKeyId: "k_1",
		Ip: "203.0.113.8", Route: "/v1/pay", Method: "POST"}}
	if !proto.Equal(last, wantReq) {
		t.Fatalf("check sent %v\nwant %v", last, wantReq)
	}
}

func TestForwardAuthDeny(t *testing.T) {
	for _, c := range []struct {
		name, query string
		resp        *pb.CheckResponse
		code        int
		retry       string
	}{
		{"over the limit", "", decided(pb.Decision_DECISION_DENY, pb.Reason_REASON_OVER_LIMIT, 1200*time.Millisecond), 429, "2"},
		{"nginx asks for 403", "?deny_status=403", decided(pb.Decision_DECISION_DENY, pb.Reason_REASON_OVER_LIMIT, 1200*time.Millisecond), 403, "2"},
		// A wait of 0 would have clients retry at once.
		{"fail closed", "", decided(pb.Decision_DECISION_DENY, pb.Reason_REASON_UNAVAILABLE, 0), 503, "1"},
		{"emergency block", "", &pb.CheckResponse{Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_EMERGENCY_BLOCK, AppliedPolicyId: "block-1"}, 429, "1"},
	} {
		f := &fakeBackend{resp: c.resp}
		w := forward(f, "GET", "/v1/forward-auth"+c.query, nil)
		if w.Code != c.code || w.Header().Get("Retry-After") != c.retry || w.Header().Get("X-Rate-Limit-Decision") != "DENY" {
			t.Errorf("%s: %d Retry-After %q decision %q, want %d %q DENY", c.name, w.Code, w.Header().Get("Retry-After"),
				w.Header().Get("X-Rate-Limit-Decision"), c.code, c.retry)
		}
		if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(w.Header().Get("X-Request-Id")) {
			t.Errorf("%s: made request id %q", c.name, w.Header().Get("X-Request-Id"))
		}
	}
	// No policy decided: no numbers to copy.
	f := &fakeBackend{resp: &pb.CheckResponse{Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_EMERGENCY_BLOCK, AppliedPolicyId: "block-1"}}
	if w := forward(f, "GET", "/v1/forward-auth", nil); w.Header().Get("Ratelimit") != "" || w.Header().Get("X-Policy-Id") != "block-1" {
		t.Errorf("block: %v", w.Header())
	}
}

func TestForwardAuthRefuses(t *testing.T) {
	f := &fakeBackend{}
	w := forward(f, "GET", "/v1/forward-auth?deny_status=500", nil)
	if e := errorBody(t, w); w.Code != 400 || e.Field != "deny_status" || f.numCalls() != 0 {
		t.Fatalf("bad deny_status: %d %+v, %d calls", w.Code, e, f.numCalls())
	}
	// The client's query, which Caddy passes along, is not the route's.
	f = &fakeBackend{}
	if w = forward(f, "GET", "/v1/forward-auth?page=2", nil); w.Code != 200 || f.numCalls() != 1 {
		t.Fatalf("a client's query parameter: %d, %d calls", w.Code, f.numCalls())
	}
	// A request id that cannot go into a log line is replaced.
	f = &fakeBackend{err: status.Error(codes.Unavailable, "no node")}
	w = forward(f, "GET", "/v1/forward-auth", map[string]string{"X-Request-Id": "a b"})
	if w.Code != 503 || w.Header().Get("X-Request-Id") == "a b" || w.Header().Get("X-Request-Id") == "" {
		t.Fatalf("backend down: %d, request id %q", w.Code, w.Header().Get("X-Request-Id"))
	}
	// The token check comes first.
	f = &fakeBackend{refuse: true}
	if w = forward(f, "POST", "/v1/forward-auth", nil); w.Code != 401 || f.numCalls() != 0 || w.Header().Get("X-Test-Access") != "check" {
		t.Fatalf("refused: %d, %d calls", w.Code, f.numCalls())
	}
}
