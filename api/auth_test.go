package api

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quorate/quorate/security"
)

// TestAuthorize: the access matrix of the public surfaces, with and without
// a tokens file, from loopback and from elsewhere.
func TestAuthorize(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	check, read, admin := security.NewToken(), security.NewToken(), security.NewToken()
	lines := security.TokenLine("app", security.ScopeCheck, check) + "\n" +
		security.TokenLine("prom", security.ScopeRead, read) + "\n" +
		security.TokenLine("ops", security.ScopeAdmin, admin) + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := security.LoadTokens(file)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	withTokens := newAuthorizer(tokens, log, prometheus.NewRegistry())
	without := newAuthorizer(nil, log, prometheus.NewRegistry())
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 5000}
	const (
		checkM  = "/quorate.v1.RateLimiter/Check"
		streamM = "/quorate.v1.RateLimiter/CheckStream"
		statusM = "/quorate.v1.Admin/Status"
		futureM = "/quorate.v1.Admin/SetPolicy"
		healthM = "/grpc.health.v1.Health/Check"
	)
	for _, tt := range []struct {
		name   string
		a      *authorizer
		method string
		header string
		addr   net.Addr
		want   codes.Code
	}{
		{"health is open", withTokens, healthM, "", remote, codes.OK},
		{"check token checks", withTokens, checkM, "Bearer " + check, remote, codes.OK},
		{"check token streams", withTokens, streamM, "Bearer " + check, remote, codes.OK},
		{"check token reads topology", withTokens, statusM, "Bearer " + check, remote, codes.OK},
		{"read token reads status", withTokens, statusM, "Bearer " + read, remote, codes.OK},
		{"read token cannot check", withTokens, checkM, "Bearer " + read, remote, codes.PermissionDenied},
		{"admin token cannot check", withTokens, checkM, "Bearer " + admin, remote, codes.PermissionDenied},
		{"admin RPC needs admin", withTokens, futureM, "Bearer " + check, remote, codes.PermissionDenied},
		{"admin token on admin RPC", withTokens, futureM, "Bearer " + admin, remote, codes.OK},
		{"no token, loopback, tokens configured", withTokens, checkM, "", local, codes.Unauthenticated},
		{"not a bearer header", withTokens, checkM, "Basic " + check, remote, codes.Unauthenticated},
		{"unknown token", withTokens, checkM, "Bearer qrt_x", remote, codes.Unauthenticated},
		{"no tokens file: loopback check", without, checkM, "", local, codes.OK},
		{"no tokens file: loopback status", without, statusM, "", local, codes.OK},
		{"no tokens file: remote check", without, checkM, "", remote, codes.Unauthenticated},
		{"no tokens file: loopback admin", without, futureM, "", local, codes.Unauthenticated},
		{"no tokens file: a token is no key", without, checkM, "Bearer " + admin, local, codes.Unauthenticated},
	} {
		_, err := tt.a.authorize(methodAccess(tt.method), tt.method, tt.header, tt.addr)
		if got := status.Code(err); got != tt.want {
			t.Errorf("%s: %v; want %v", tt.name, err, tt.want)
		}
	}
}
