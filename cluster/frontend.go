package cluster

import (
	"context"
	"github.com/quorate/quorate/telemetry/decisionlog"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/security"
)

// Frontend is a node's public surface, made above this package (package
// api) and wired in by the binary (Config.Frontend): the node serves it
// on its public gRPC listener, with the node's TLS, and on its HTTP
// listener.
type Frontend interface {
	// ServerOptions are the public gRPC server's options (authorization).
	ServerOptions() []grpc.ServerOption
	// Register adds the public services to the server.
	Register(s *grpc.Server)
	// HTTP is the HTTP listener's handler.
	HTTP() http.Handler
	// SetServing reports readiness (gRPC health); Shutdown, the stop.
	SetServing(ok bool)
	Shutdown()
}

// bareFrontend serves nothing: a node built without a front end (a test's).
type bareFrontend struct{}

func (bareFrontend) ServerOptions() []grpc.ServerOption { return nil }
func (bareFrontend) Register(*grpc.Server)              {}
func (bareFrontend) HTTP() http.Handler                 { return http.NotFoundHandler() }
func (bareFrontend) SetServing(bool)                    {}
func (bareFrontend) Shutdown()                          {}

// What a front end needs of the node (api.Node).

// Shards is the node's way to the shards, the one its engine decides with.
func (n *Node) Shards() decide.Shards { return nodeShards{n} }

// WaitPolicies waits until the node's policy set is at version v or
// later, false if ctx ends first.
func (n *Node) WaitPolicies(ctx context.Context, v uint64) bool {
	return n.metaFSM.WaitVersion(ctx, v)
}

// WaitTenants waits until the node's tenant assignment is at version v or
// later, false if ctx ends first.
func (n *Node) WaitTenants(ctx context.Context, v uint64) bool {
	return n.metaFSM.WaitTenants(ctx, v)
}

// Engine decides checks with the node's shards, policies and leases.
func (n *Node) Engine() *decide.Engine { return n.engine }

// DecisionLog is the node's decision log.
func (n *Node) DecisionLog() *decisionlog.Logger { return n.decided.log }

// NodeID names this node.
func (n *Node) NodeID() string { return n.cfg.NodeID }

// LeaderOf names shard s's leader as this node knows it ("" if unknown).
func (n *Node) LeaderOf(s int) string { return n.leaderOf(s) }

// Ready reports whether the node can decide checks: bootstrapped, every
// shard with a known leader, policies caught up.
func (n *Node) Ready() bool { return n.ready.Load() }

// Stopping is closed when the node begins to stop.
func (n *Node) Stopping() <-chan struct{} { return n.stopping }

// Tokens are the tokens the node's callers authenticate with (nil without
// a tokens file); the node reloads them with its other credentials.
func (n *Node) Tokens() *security.Tokens { return n.sec.tokens }

// Audit is the log of admin actions.
func (n *Node) Audit() *slog.Logger { return n.sec.audit }

// Registry holds the node's metrics.
func (n *Node) Registry() *prometheus.Registry { return n.metrics.Registry() }

// Config is the node's configuration with its defaults filled in.
func (n *Node) Config() Config { return n.cfg }
