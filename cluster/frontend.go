package cluster

import (
	"context"
	"net/http"

	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// What the front ends above this package (the HTTP/JSON API) call: the
// same code the node's gRPC services run, in-process.

// Check decides a request exactly as RateLimiter.Check does.
func (n *Node) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return n.check(ctx, req)
}

// Admin is the node's Admin service.
func (n *Node) Admin() pb.AdminServer { return adminServer{n: n} }

// Guard wraps h so that only callers with a token of one of scopes reach
// it (401 or 403 with the reason otherwise). With loopback, callers on
// loopback need none until the node has a tokens file; with audit, each
// call is logged with the caller's name, and the handler's context names
// the caller for what it changes.
func (n *Node) Guard(scopes security.Scope, loopback, audit bool, h http.Handler) http.Handler {
	return n.sec.auth.http(access{scopes: scopes, loopback: loopback, audit: audit}, h)
}
