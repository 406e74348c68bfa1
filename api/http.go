package api

import (
	"context"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quorate/quorate/api/ui"
	"github.com/quorate/quorate/policy/extract"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// httpHandler serves /healthz (the process is up), /readyz (the node can
// decide checks: it is bootstrapped, every shard has a leader, and its
// policies have caught up with the meta group), both open for probes,
// /metrics (Prometheus, read tokens), with Pprof /debug/pprof (admin
// tokens), and the HTTP/JSON API.
func (f *Frontend) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !f.node.Ready() {
			http.Error(w, "not ready: waiting for the cluster to bootstrap, for shard leaders, or for the policy set to catch up", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", f.auth.http(access{scopes: security.ScopeRead},
		promhttp.HandlerFor(f.cfg.Registry, promhttp.HandlerOpts{})))
	if f.cfg.Pprof {
		// Profiles for finding where a node's time goes; they reveal memory
		// and cost CPU, so only admin tokens get them, and each is logged.
		admin := access{scopes: security.ScopeAdmin, audit: true}
		mux.Handle("GET /debug/pprof/", f.auth.http(admin, http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/profile", f.auth.http(admin, http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/trace", f.auth.http(admin, http.HandlerFunc(pprof.Trace)))
		mux.Handle("GET /debug/pprof/symbol", f.auth.http(admin, http.HandlerFunc(pprof.Symbol)))
	}
	// The status page: read tokens, presented once and kept in a cookie.
	mux.Handle("/ui/", ui.Handler(ui.Config{Source: overviewSource{f.node}, Authorize: f.auth.canRead}))
	// The decision log names tenants, keys and addresses: admin tokens.
	b := backend{f: f, AdminServer: &admin{f: f}}
	mux.Handle("GET /v1/admin/decisions", f.auth.http(access{scopes: security.ScopeAdmin, audit: true}, http.HandlerFunc(b.tailHTTP)))
	Register(mux, b, f.cfg.Registry)
	RegisterTenants(mux, b)
	return mux
}

// backend is the HTTP/JSON API's way to the node: the calls its gRPC
// twins answer, with the scopes they ask for.
type backend struct {
	pb.AdminServer
	f *Frontend
}

func (b backend) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return b.f.Check(ctx, req)
}

func (b backend) Extractor() *extract.Extractor {
	s, _ := b.f.node.Policies()
	return s.Extractor()
}

func (b backend) Guard(a Access, h http.Handler) http.Handler {
	switch a {
	case CheckAccess:
		return b.f.auth.http(access{scopes: security.ScopeCheck, loopback: true}, h)
	case ReadAccess:
		return b.f.auth.http(access{scopes: security.ScopeRead | security.ScopeAdmin}, h)
	}
	return b.f.auth.http(access{scopes: security.ScopeAdmin, audit: true}, h)
}
