package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/policy/extract"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// fakeBackend records each call and answers with resp (or err). With
// refuse, its Guard answers 401 and calls nothing.
type fakeBackend struct {
	mu     sync.Mutex
	calls  []string      // method names, in order; guarded by mu
	last   proto.Message // the last request; guarded by mu
	resp   proto.Message // answer of any method whose type it fits
	err    error
	refuse bool
	// extractor is what Extractor returns (nil: the default).
	extractor *extract.Extractor
}

func (f *fakeBackend) record(method string, req proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
	f.last = req
}

// reply is f.resp if it is a T, else a zero T.
func reply[T proto.Message](f *fakeBackend, zero T) (T, error) {
	if f.err != nil {
		var none T
		return none, f.err
	}
	if r, ok := f.resp.(T); ok {
		return r, nil
	}
	return zero, nil
}

func (f *fakeBackend) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	f.record("Check", req)
	return reply(f, &pb.CheckResponse{Decision: pb.Decision_DECISION_ALLOW})
}

func (f *fakeBackend) ApplyPolicies(_ context.Context, req *pb.ApplyPoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	f.record("ApplyPolicies", req)
	return reply(f, &pb.ApplyPoliciesResponse{})
}

func (f *fakeBackend) DeletePolicies(_ context.Context, req *pb.DeletePoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	f.record("DeletePolicies", req)
	return reply(f, &pb.ApplyPoliciesResponse{})
}

func (f *fakeBackend) GetPolicy(_ context.Context, req *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error) {
	f.record("GetPolicy", req)
	return reply(f, &pb.GetPolicyResponse{Json: "{}"})
}

func (f *fakeBackend) ListPolicies(_ context.Context, req *pb.ListPoliciesRequest) (*pb.ListPoliciesResponse, error) {
	f.record("ListPolicies", req)
	return reply(f, &pb.ListPoliciesResponse{})
}

func (f *fakeBackend) Block(_ context.Context, req *pb.BlockRequest) (*pb.BlockResponse, error) {
	f.record("Block", req)
	return reply(f, &pb.BlockResponse{})
}

func (f *fakeBackend) Unblock(_ context.Context, req *pb.UnblockRequest) (*pb.ApplyPoliciesResponse, error) {
	f.record("Unblock", req)
	return reply(f, &pb.ApplyPoliciesResponse{})
}

func (f *fakeBackend) Explain(_ context.Context, req *pb.ExplainRequest) (*pb.ExplainResponse, error) {
	f.record("Explain", req)
	return reply(f, &pb.ExplainResponse{})
}

func (f *fakeBackend) TopKeys(_ context.Context, req *pb.TopKeysRequest) (*pb.TopKeysResponse, error) {
	f.record("TopKeys", req)
	return reply(f, &pb.TopKeysResponse{})
}

func (f *fakeBackend) PolicyHistory(_ context.Context, req *pb.PolicyHistoryRequest) (*pb.PolicyHistoryResponse, error) {
	f.record("PolicyHistory", req)
	return reply(f, &pb.PolicyHistoryResponse{})
}

func (f *fakeBackend) PolicyDiff(_ context.Context, req *pb.PolicyDiffRequest) (*pb.PolicyDiffResponse, error) {
	f.record("PolicyDiff", req)
	return reply(f, &pb.PolicyDiffResponse{})
}

func (f *fakeBackend) RollbackPolicies(_ context.Context, req *pb.RollbackPoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	f.record("RollbackPolicies", req)
	return reply(f, &pb.ApplyPoliciesResponse{})
}

func (f *fakeBackend) Extractor() *extract.Extractor {
	if f.extractor != nil {
		return f.extractor
	}
	return extract.Default()
}

func (f *fakeBackend) Guard(a Access, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Test-Access", a.String())
		if f.refuse {
			http.Error(w, "refused: needs "+a.String(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (f *fakeBackend) lastCall() (string, proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return "", nil
	}
	return f.calls[len(f.calls)-1], f.last
}

func (f *fakeBackend) numCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// serve sends one request to the routes Register adds for f.
func serve(f *fakeBackend, method, target, body string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	Register(mux, f, nil)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	return w
}

// errorBody decodes the API's error format.
func errorBody(t *testing.T, w *httptest.ResponseRecorder) apiError {
	t.Helper()
	var e struct {
		Error apiError `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	return e.Error
}
