package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

// fakeDecider answers every check with ans (or err) and keeps the
// requests it was asked.
type fakeDecider struct {
	snap *policy.Snapshot
	ans  *decide.Answer
	err  error

	mu   sync.Mutex
	reqs []*decide.Request
}

func (f *fakeDecider) Check(_ context.Context, req *decide.Request) (*decide.Answer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	return f.ans, f.err
}

func (f *fakeDecider) Policies() *policy.Snapshot { return f.snap }

func (f *fakeDecider) last(t *testing.T) *decide.Request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("the limiter was not asked")
	}
	return f.reqs[len(f.reqs)-1]
}

func answerOf(d decide.Decision, r decide.Reason, retry time.Duration) *decide.Answer {
	return &decide.Answer{Decision: d, Reason: r, AppliedPolicyID: "plan_free",
		Policies: []decide.PolicyResult{{PolicyID: "plan_free", Decision: d, Reason: r, Limit: 10, Remaining: 3,
			ResetAfter: 1500 * time.Millisecond, RetryAfter: retry, Algorithm: fsm.TokenBucket}},
		Results: []decide.Result{{PolicyID: "plan_free", Decision: d, Reason: r, Algorithm: fsm.TokenBucket}}}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serveMiddleware sends r through the middleware over d to a handler that
// counts its calls and reports the request id it saw.
func serveMiddleware(d Decider, cfg MiddlewareConfig, r *http.Request) (*httptest.ResponseRecorder, int, string) {
	calls, seen := 0, ""
	h := Middleware(d, cfg)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		seen = r.Header.Get("X-Request-Id")
		w.WriteHeader(http.StatusOK)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, calls, seen
}

func TestMiddlewareHeadersAndStatus(t *testing.T) {
	snap, err := policy.Compile(nil, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ans     *decide.Answer
		status  int
		calls   int
		headers map[string]string
	}{
		{"allow", answerOf(decide.Allow, decide.WithinLimit, 0), 200, 1, map[string]string{
			"RateLimit-Policy": `"plan_free";q=10`, "RateLimit": `"plan_free";r=3;t=2`,
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "2",
			"X-Rate-Limit-Decision": "ALLOW", "X-Policy-Id": "plan_free", "X-Request-Id": "req-1",
			"X-Tenant-Id": "t_1", "Retry-After": ""}},
		{"deny", answerOf(decide.Deny, decide.OverLimit, 2100*time.Millisecond), 429, 0, map[string]string{
			"Retry-After": "3", "X-Rate-Limit-Decision": "DENY", "X-Rate-Limit-Reason": "TOKEN_BUCKET_EMPTY",
			"X-RateLimit-Remaining": "3", "X-Policy-Id": "plan_free", "X-Request-Id": "req-1"}},
		{"fails closed", answerOf(decide.Deny, decide.Unavailable, 0), 503, 0, map[string]string{
			"X-Rate-Limit-Reason": "STORE_UNAVAILABLE", "Retry-After": "1"}},
		{"no policy", &decide.Answer{Decision: decide.Allow, Reason: decide.NoPolicy}, 200, 1, map[string]string{
			"X-Rate-Limit-Reason": "NO_MATCHING_POLICY", "RateLimit": "", "X-Policy-Id": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDecider{snap: snap, ans: tt.ans}
			r := httptest.NewRequest("GET", "/v1/things?x=1", nil)
			r.Header.Set("X-Request-Id", "req-1")
			r.Header.Set("X-Tenant-Id", "t_1")
			r.Header.Set("X-Api-Key-Id", "k_1")
			w, calls, seen := serveMiddleware(d, MiddlewareConfig{Logger: quiet()}, r)
			if w.Code != tt.status || calls != tt.calls {
				t.Errorf("status %d, handler called %d times; want %d and %d", w.Code, calls, tt.status, tt.calls)
			}
			for k, v := range tt.headers {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if calls > 0 && seen != "req-1" {
				t.Errorf("the handler saw request id %q, want req-1", seen)
			}
			got := d.last(t)
			if got.ID != "req-1" || got.Descriptors.TenantID != "t_1" || got.Descriptors.APIKeyID != "k_1" ||
				got.Descriptors.Route != "/v1/things" || got.Descriptors.Method != "GET" || got.Descriptors.IP != "192.0.2.1" {
				t.Errorf("the limiter was asked %+v %+v", got, got.Descriptors)
			}
		})
	}
}

// TestMiddlewareNoDecision: when the limiter cannot decide at all, the
// request goes through unless the middleware fails closed.
func TestMiddlewareNoDecision(t *testing.T) {
	d := &fakeDecider{err: decide.ErrPoliciesBehind}
	for _, closed := range []bool{false, true} {
		r := httptest.NewRequest("GET", "/", nil)
		w, calls, _ := serveMiddleware(d, MiddlewareConfig{FailClosed: closed, Logger: quiet()}, r)
		wantStatus, wantCalls, wantReason := 200, 1, "FAIL_OPEN"
		if closed {
			wantStatus, wantCalls, wantReason = 503, 0, "STORE_UNAVAILABLE"
		}
		if w.Code != wantStatus || calls != wantCalls || w.Header().Get("X-Rate-Limit-Reason") != wantReason {
			t.Errorf("fail closed %v: status %d, %d calls, reason %q; want %d, %d, %s", closed, w.Code, calls,
				w.Header().Get("X-Rate-Limit-Reason"), wantStatus, wantCalls, wantReason)
		}
		if id := w.Header().Get("X-Request-Id"); len(id) != 32 {
			t.Errorf("made request id %q, want 32 hex digits", id)
		}
	}
}

// TestMiddlewareExtractsAsThePolicySetSays: the set's extraction, not the
// defaults, reads the request.
func TestMiddlewareExtractsAsThePolicySetSays(t *testing.T) {
	snap, err := policy.Compile(nil, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	x, err := extract.Compile(&extract.Extraction{Headers: map[string]string{"tenant_id": "X-Org"}, Custom: map[string]string{"team": "X-Team"}})
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDecider{snap: snap.WithExtractor(x), ans: answerOf(decide.Allow, decide.WithinLimit, 0)}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Org", "org_9")
	r.Header.Set("X-Tenant-Id", "ignored")
	r.Header.Set("X-Team", "blue")
	serveMiddleware(d, MiddlewareConfig{Logger: quiet()}, r)
	if got := d.last(t).Descriptors; got.TenantID != "org_9" || got.Custom["team"] != "blue" {
		t.Errorf("descriptors %+v; want tenant org_9 and team blue from the set's headers", got)
	}
}

// TestMiddlewareShapes: a shaping delay holds the request; one longer
// than MaxDelay is a denial.
func TestMiddlewareShapes(t *testing.T) {
	ans := answerOf(decide.Allow, decide.WithinLimit, 0)
	ans.Results[0].Delay = 20 * time.Millisecond
	d := &fakeDecider{ans: ans}
	start := time.Now()
	w, calls, _ := serveMiddleware(d, MiddlewareConfig{Logger: quiet()}, httptest.NewRequest("GET", "/", nil))
	if w.Code != 200 || calls != 1 || time.Since(start) < 20*time.Millisecond {
		t.Errorf("shaped: status %d, %d calls after %v; want 200, 1, at least 20ms", w.Code, calls, time.Since(start))
	}
	w, calls, _ = serveMiddleware(d, MiddlewareConfig{MaxDelay: 10 * time.Millisecond, Logger: quiet()}, httptest.NewRequest("GET", "/", nil))
	if w.Code != 429 || calls != 0 {
		t.Errorf("over MaxDelay: status %d, %d calls; want 429 and none", w.Code, calls)
	}
}

func TestUnaryInterceptor(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.v1.Orders/Create"}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant-id", "t_1", "x-request-id", "rq"))
	calls := 0
	handler := func(ctx context.Context, _ any) (any, error) {
		calls++
		md, _ := metadata.FromIncomingContext(ctx)
		return md.Get("x-request-id"), nil
	}
	d := &fakeDecider{ans: answerOf(decide.Deny, decide.OverLimit, 1500*time.Millisecond)}
	_, err := UnaryInterceptor(d, MiddlewareConfig{Logger: quiet()})(ctx, nil, info, handler)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || calls != 0 {
		t.Fatalf("deny: %v, %d calls; want RESOURCE_EXHAUSTED and none", err, calls)
	}
	var retry *errdetails.RetryInfo
	for _, det := range st.Details() {
		if r, ok := det.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Errorf("RetryInfo %v, want 1.5s", retry)
	}
	if got := d.last(t).Descriptors; got.TenantID != "t_1" || got.Route != "/shop.v1.Orders/Create" || got.Method != "POST" {
		t.Errorf("descriptors %+v", got)
	}
	d.ans, d.err = nil, errors.New("no cluster")
	resp, err := UnaryInterceptor(d, MiddlewareConfig{Logger: quiet()})(ctx, nil, info, handler)
	if err != nil || calls != 1 || resp.([]string)[0] != "rq" {
		t.Errorf("fail open: %v %v, %d calls; want the handler called with request id rq", resp, err, calls)
	}
	_, err = UnaryInterceptor(d, MiddlewareConfig{FailClosed: true, Logger: quiet()})(ctx, nil, info, handler)
	if status.Code(err) != codes.Unavailable || calls != 1 {
		t.Errorf("fail closed: %v, %d calls; want UNAVAILABLE, handler not called", err, calls)
	}
}
