package main

import (
	"context"
	"net/http"

	"github.com/quorate/quorate/api"
	"github.com/quorate/quorate/cluster"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// apiBackend serves the HTTP/JSON API (package api) from the node, with
// the scopes its gRPC twins ask for.
type apiBackend struct {
	pb.AdminServer
	n *cluster.Node
}

func (b apiBackend) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return b.n.Check(ctx, req)
}

func (b apiBackend) Guard(a api.Access, h http.Handler) http.Handler {
	switch a {
	case api.CheckAccess:
		return b.n.Guard(security.ScopeCheck, true, false, h)
	case api.ReadAccess:
		return b.n.Guard(security.ScopeRead|security.ScopeAdmin, false, false, h)
	}
	return b.n.Guard(security.ScopeAdmin, false, true, h)
}

// httpRoutes adds the HTTP/JSON API to a node's HTTP server.
func httpRoutes(mux *http.ServeMux, n *cluster.Node) {
	api.Register(mux, apiBackend{AdminServer: n.Admin(), n: n})
}
