package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/security"
)

// access is what a method asks of its caller.
type access struct {
	scopes   security.Scope // any one of them will do; 0: open to anyone
	loopback bool           // open to loopback callers when no tokens file is configured
	audit    bool           // logged with the caller's name
}

// methodAccess maps a public gRPC method to its access. Status is allowed to
// check tokens as well as read ones: the routed client (DialCluster) learns
// the topology from it, and what it reveals (node addresses, shard leaders)
// is what a client of the cluster must know to reach it anyway.
func methodAccess(method string) access {
	switch {
	case strings.HasPrefix(method, "/grpc.health.v1.Health/"):
		return access{} // load balancer and Kubernetes probes
	case method == "/quorate.v1.RateLimiter/Check", method == "/quorate.v1.RateLimiter/CheckStream", method == shouldRateLimitMethod:
		return access{scopes: security.ScopeCheck, loopback: true}
	case method == "/quorate.v1.Admin/Status":
		return access{scopes: security.ScopeCheck | security.ScopeRead, loopback: true}
	case strings.HasPrefix(method, "/quorate.v1.Gateway/"):
		// Never open to loopback without a token: a holder of leases can
		// strand budget.
		return access{scopes: security.ScopeLease}
	case method == "/quorate.v1.Admin/ListPolicies", method == "/quorate.v1.Admin/GetPolicy", method == "/quorate.v1.Admin/Explain",
		method == "/quorate.v1.Admin/TopKeys", method == "/quorate.v1.Admin/PolicyHistory", method == "/quorate.v1.Admin/PolicyDiff",
		method == "/quorate.v1.Admin/GetTenant", method == "/quorate.v1.Admin/ListTenants":
		return access{scopes: security.ScopeRead | security.ScopeAdmin}
	}
	// Every other method, the admin RPCs to come among them.
	return access{scopes: security.ScopeAdmin, audit: true}
}

// authorizer authenticates the callers of the public gRPC and HTTP
// surfaces by bearer token and checks their scopes.
type authorizer struct {
	tokens  *security.Tokens // nil without --tokens-file
	log     *slog.Logger
	refused *prometheus.CounterVec // reason
}

func newAuthorizer(tokens *security.Tokens, log *slog.Logger, reg prometheus.Registerer) *authorizer {
	a := &authorizer{tokens: tokens, log: log, refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_auth_refused_total",
		Help: "Calls refused for want of credentials, by reason: unauthenticated (no or unknown token) or permission (token without the scope).",
	}, []string{"reason"})}
	reg.MustRegister(a.refused)
	return a
}

// authorize decides whether the caller presenting header (the value of
// "authorization", "" if none) from addr may use what needs acc.
func (a *authorizer) authorize(acc access, what, header string, addr net.Addr) (security.Principal, error) {
	if acc.scopes == 0 {
		return security.Principal{Name: "anyone"}, nil
	}
	if a.tokens == nil {
		if acc.loopback && header == "" && isLoopback(addr) {
			return security.Principal{Name: "loopback"}, nil
		}
		return a.refuse(codes.Unauthenticated, "unauthenticated", "%s: no --tokens-file is configured on this node, so only checks from loopback are served; %s needs a token with scope %s", what, what, acc.scopes)
	}
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return a.refuse(codes.Unauthenticated, "unauthenticated", "%s needs a token with scope %s: send \"authorization: Bearer <token>\"", what, acc.scopes)
	}
	p, ok := a.tokens.Lookup(token)
	if !ok {
		return a.refuse(codes.Unauthenticated, "unauthenticated", "%s: the token is not in this node's --tokens-file", what)
	}
	if p.Scopes&acc.scopes == 0 {
		return a.refuse(codes.PermissionDenied, "permission", "%s needs scope %s; token %q has %s", what, acc.scopes, p.Name, p.Scopes)
	}
	if acc.audit {
		a.log.Info("audit: admin action", "token", p.Name, "action", what, "from", addrString(addr))
	}
	return p, nil
}

func (a *authorizer) refuse(code codes.Code, reason, format string, args ...any) (security.Principal, error) {
	a.refused.WithLabelValues(reason).Inc()
	return security.Principal{}, status.Errorf(code, "auth: "+format, args...)
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

func addrString(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	return addr.String()
}

func (a *authorizer) authorizeRPC(ctx context.Context, method string) (context.Context, error) {
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
	}
	var addr net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr
	}
	p, err := a.authorize(methodAccess(method), method, header, addr)
	if err != nil {
		return ctx, err
	}
	return security.WithPrincipal(ctx, p), nil
}

func (a *authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := a.authorizeRPC(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a *authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if _, err := a.authorizeRPC(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// http wraps an HTTP handler that needs one of scopes, answering 401 or
// 403 with the reason.
func (a *authorizer) http(acc access, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var addr net.Addr
		if ap, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
			addr = ap
		}
		p, err := a.authorize(acc, r.Method+" "+r.URL.Path, r.Header.Get("Authorization"), addr)
		if err != nil {
			code := http.StatusUnauthorized
			if status.Code(err) == codes.PermissionDenied {
				code = http.StatusForbidden
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="quorate"`)
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		h.ServeHTTP(w, r.WithContext(security.WithPrincipal(r.Context(), p)))
	})
}

// canRead reports whether token may read (the status page's question):
// a token with the read or admin scope. Without a tokens file nothing
// may.
func (a *authorizer) canRead(token string) bool {
	if a.tokens == nil || token == "" {
		return false
	}
	p, ok := a.tokens.Lookup(token)
	return ok && p.Scopes&(security.ScopeRead|security.ScopeAdmin) != 0
}
