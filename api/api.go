// Package api is a quorate node's public surface: the gRPC RateLimiter
// (unary and stream) and Admin services, gRPC health, and the HTTP server
// (probes, metrics, profiles and the HTTP/JSON decision and admin API),
// with the token checks in front of each. It turns wire forms into calls
// on the node and its decision engine and their answers back, and is
// where their errors become gRPC and HTTP status codes.
package api

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/policy/extract"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Access is what a route needs from the caller's token.
type Access int

const (
	// CheckAccess: decision routes (the check scope).
	CheckAccess Access = iota
	// ReadAccess: routes that read the policy set (the read scope).
	ReadAccess
	// AdminAccess: routes that change the policy set (the admin scope).
	AdminAccess
)

func (a Access) String() string {
	switch a {
	case CheckAccess:
		return "check"
	case ReadAccess:
		return "read"
	case AdminAccess:
		return "admin"
	}
	return "unknown"
}

// Backend is the node, in-process: the same calls its gRPC services answer.
type Backend interface {
	Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error)
	ApplyPolicies(context.Context, *pb.ApplyPoliciesRequest) (*pb.ApplyPoliciesResponse, error)
	DeletePolicies(context.Context, *pb.DeletePoliciesRequest) (*pb.ApplyPoliciesResponse, error)
	GetPolicy(context.Context, *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error)
	ListPolicies(context.Context, *pb.ListPoliciesRequest) (*pb.ListPoliciesResponse, error)
	Block(context.Context, *pb.BlockRequest) (*pb.BlockResponse, error)
	Unblock(context.Context, *pb.UnblockRequest) (*pb.ApplyPoliciesResponse, error)
	Explain(context.Context, *pb.ExplainRequest) (*pb.ExplainResponse, error)
	TopKeys(context.Context, *pb.TopKeysRequest) (*pb.TopKeysResponse, error)
	PolicyHistory(context.Context, *pb.PolicyHistoryRequest) (*pb.PolicyHistoryResponse, error)
	PolicyDiff(context.Context, *pb.PolicyDiffRequest) (*pb.PolicyDiffResponse, error)
	RollbackPolicies(context.Context, *pb.RollbackPoliciesRequest) (*pb.ApplyPoliciesResponse, error)
	// Extractor reads descriptors from HTTP requests (forward auth) as the
	// node's current policy set says; never nil.
	Extractor() *extract.Extractor
	// Guard wraps h with the node's token check for that access (401/403 with a message);
	// CheckAccess is open to loopback callers until tokens are configured.
	Guard(a Access, h http.Handler) http.Handler
}

// Body bounds: a check is a few hundred bytes, a policy document can hold
// thousands of tenant overrides.
const (
	MaxCheckBody    = 64 << 10
	MaxDocumentBody = 4 << 20
)

type server struct {
	b Backend
	// unknownFields counts the decision contract's fields a caller sent
	// that this version does not know, ignored, by endpoint.
	unknownFields *prometheus.CounterVec
}

// Register adds the routes to mux, and the API's metrics to reg (nil: not
// served).
func Register(mux *http.ServeMux, b Backend, reg prometheus.Registerer) {
	s := &server{b: b, unknownFields: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_http_unknown_fields_total",
		Help: "Fields of HTTP decision requests this node does not know, ignored, by endpoint.",
	}, []string{"endpoint"})}
	if reg != nil {
		reg.MustRegister(s.unknownFields)
	}
	guard := func(a Access, h http.HandlerFunc) http.Handler { return b.Guard(a, h) }
	check := guard(CheckAccess, s.check)
	for _, p := range []string{"/v1/limit/check", "/internal/v1/limit/check"} {
		mux.Handle("POST "+p, check)
		mux.Handle(p, allowOnly("POST"))
	}
	// Any method: a proxy asks with the client's.
	mux.Handle("/v1/forward-auth", guard(CheckAccess, s.forwardAuth))
	mux.Handle("GET /v1/admin/policies", guard(ReadAccess, s.listPolicies))
	mux.Handle("/v1/admin/policies", allowOnly("GET"))
	mux.Handle("GET /v1/admin/policies/{id}", guard(ReadAccess, s.getPolicy))
	mux.Handle("PUT /v1/admin/policies/{id}", guard(AdminAccess, s.putPolicy))
	mux.Handle("DELETE /v1/admin/policies/{id}", guard(AdminAccess, s.deletePolicy))
	mux.Handle("/v1/admin/policies/{id}", allowOnly("GET, PUT, DELETE"))
	mux.Handle("POST /v1/admin/policies/apply", guard(AdminAccess, s.applyPolicies))
	// GET of a policy named history is shadowed: list shows it.
	mux.Handle("GET /v1/admin/policies/history", guard(ReadAccess, s.policyHistory))
	mux.Handle("GET /v1/admin/policies/history/diff", guard(ReadAccess, s.policyDiff))
	mux.Handle("/v1/admin/policies/history/diff", allowOnly("GET"))
	mux.Handle("POST /v1/admin/policies/rollback", guard(AdminAccess, s.rollback))
	mux.Handle("POST /v1/admin/blocks", guard(AdminAccess, s.block))
	mux.Handle("/v1/admin/blocks", allowOnly("POST"))
	mux.Handle("DELETE /v1/admin/blocks/{id}", guard(AdminAccess, s.unblock))
	mux.Handle("/v1/admin/blocks/{id}", allowOnly("DELETE"))
	mux.Handle("POST /v1/admin/explain", guard(ReadAccess, s.explain))
	mux.Handle("GET /v1/admin/top", guard(ReadAccess, s.top))
	mux.Handle("/v1/admin/top", allowOnly("GET"))
	mux.Handle("/v1/admin/explain", allowOnly("POST"))
}

// ignored counts the unknown fields of one request to endpoint.
func (s *server) ignored(endpoint string, unknown []string) {
	if len(unknown) > 0 {
		s.unknownFields.WithLabelValues(endpoint).Add(float64(len(unknown)))
	}
}

// allowOnly answers 405 in the API's error format; ServeMux's own 405 is
// plain text.
func allowOnly(methods string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", methods)
		writeError(w, http.StatusMethodNotAllowed, apiError{Code: "METHOD_NOT_ALLOWED",
			Message: r.Method + " " + r.URL.Path + ": allowed: " + methods})
	})
}
