package main

import (
	"github.com/quorate/quorate/api"
	"github.com/quorate/quorate/cluster"
)

// frontend makes a node's public surface (package api): the gRPC
// RateLimiter and Admin services and the HTTP server, with the node's
// tokens, audit log and metrics (the node applies its request bounds to
// its servers itself).
func frontend(n *cluster.Node) cluster.Frontend {
	cfg := n.Config()
	return api.NewFrontend(n, api.Config{
		StreamMaxInFlight: cfg.StreamMaxInFlight, CheckTimeout: cfg.CheckTimeout, Tokens: n.Tokens(), Audit: n.Audit(), Registry: n.Registry(),
		Pprof: cfg.Security.Pprof,
	})
}
