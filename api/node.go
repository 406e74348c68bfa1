package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/tenants"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
	"github.com/quorate/quorate/telemetry"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// Node is what the public surface needs of a node (cluster.Node), in
// process: the binary passes one to NewFrontend.
type Node interface {
	// Engine decides checks.
	Engine() *decide.Engine
	// NodeID names this node; LeaderOf names shard s's leader as this
	// node knows it ("" if unknown).
	NodeID() string
	LeaderOf(s int) string
	// Status is the cluster as the node sees it.
	Status() *pb.StatusResponse
	// Now reads the node's clock.
	Now() time.Time
	// PolicySet is the replicated policy set (live blocks only);
	// ChangePolicies has the meta group apply a policy command (or
	// previews it, dry), and returns once the node decides with it.
	PolicySet() meta.PolicyState
	// Policies is the compiled set the node decides with (never nil) and
	// whether it has caught up with the meta group.
	Policies() (*policy.Snapshot, bool)
	ChangePolicies(ctx context.Context, c *meta.Command, dryRun bool) (meta.Result, error)
	// PolicyHistory is the replicated set (all its blocks) and its
	// history, of one version.
	PolicyHistory() (meta.PolicyState, meta.History)
	// Tenants is the tenant assignment (nil: none); ChangeTenants has the
	// meta group apply a tenant command and returns once the node
	// resolves with it.
	Tenants() *tenants.Table
	ChangeTenants(ctx context.Context, c *meta.Command) (meta.TenantResult, error)
	// Leave, RemoveNode and SplitShards change the cluster's record.
	Leave(ctx context.Context) (epoch uint64, err error)
	RemoveNode(ctx context.Context, who, id string) (epoch uint64, err error)
	SplitShards(ctx context.Context, who string, shards []uint32, all bool, at uint64) ([]meta.Split, uint64, error)
	// Ready reports whether the node can decide checks (/readyz).
	Ready() bool
	// Stopping is closed when the node begins to stop: streams drain.
	Stopping() <-chan struct{}
	// Shards is the node's way to the shards (the engine's): the Gateway
	// service routes and submits embedded limiters' operations with it.
	Shards() decide.Shards
	// WaitPolicies waits until the set's version is at least v, false if
	// ctx ends first.
	WaitPolicies(ctx context.Context, v uint64) bool
	// WaitTenants waits until the tenant assignment's version is at
	// least v, false if ctx ends first.
	WaitTenants(ctx context.Context, v uint64) bool
	// Reports gathers every member's own report (telemetry.Report) with
	// the top keys q asks for: the status page and TopKeys merge them.
	Reports(ctx context.Context, q telemetry.TopQuery) []telemetry.Report
	// DecisionLog is the node's decision log (live tails subscribe to it).
	DecisionLog() *decisionlog.Logger
}

// Config is the public surface's settings. Zero values take the defaults.
type Config struct {
	// StreamMaxInFlight bounds one CheckStream's requests read and not yet
	// answered (default 1024); CheckTimeout is a streamed check's deadline
	// when it sets none (default 1s).
	StreamMaxInFlight int
	CheckTimeout      time.Duration
	// Tokens authenticate callers (nil: checks from loopback only, nothing
	// else to anyone). Audit gets a line per admin call.
	Tokens *security.Tokens
	Audit  *slog.Logger
	// Registry has the node's metrics, served on /metrics to read tokens;
	// the surface registers its own there too.
	Registry *prometheus.Registry
	// Pprof serves /debug/pprof to admin tokens.
	Pprof bool
}

func (c *Config) setDefaults() {
	if c.StreamMaxInFlight <= 0 {
		c.StreamMaxInFlight = 1024
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = decide.DefaultCheckTimeout
	}
	if c.Audit == nil {
		c.Audit = slog.Default()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
}

// Frontend is a node's public surface: the gRPC RateLimiter and Admin
// services, gRPC health, and the HTTP server's handler, with the token
// checks in front of each.
type Frontend struct {
	cfg    Config
	node   Node
	auth   *authorizer
	rl     *rateLimiter
	gw     *gateway
	rls    *rls
	health *health.Server
}

// NewFrontend makes the public surface of node.
func NewFrontend(node Node, cfg Config) *Frontend {
	cfg.setDefaults()
	f := &Frontend{cfg: cfg, node: node, health: health.NewServer()}
	f.auth = newAuthorizer(cfg.Tokens, cfg.Audit, cfg.Registry)
	f.rl = &rateLimiter{node: node, cfg: &f.cfg}
	f.gw = newGateway(node, cfg.Registry)
	f.rls = &rls{node: node}
	f.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	return f
}

// ServerOptions are the public gRPC server's interceptors, token checks
// first: the caller adds its transport credentials.
func (f *Frontend) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(f.auth.unary),
		grpc.ChainStreamInterceptor(f.auth.stream),
	}
}

// Register adds the public services to s: Envoy's RateLimitService beside
// quorate's own.
func (f *Frontend) Register(s *grpc.Server) {
	healthpb.RegisterHealthServer(s, f.health)
	pb.RegisterRateLimiterServer(s, f.rl)
	registerRLS(s, f.rls)
	pb.RegisterAdminServer(s, &admin{f: f})
	pb.RegisterGatewayServer(s, f.gw)
}

// SetServing sets the gRPC health status: serving once the node is ready.
func (f *Frontend) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	f.health.SetServingStatus("", st)
}

// Shutdown marks every service not serving, for good.
func (f *Frontend) Shutdown() { f.health.Shutdown() }

// Check decides a request exactly as RateLimiter.Check does.
func (f *Frontend) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return f.rl.check(ctx, req)
}

// HTTP is the node's HTTP handler: probes, metrics, profiles, and the
// HTTP/JSON decision and admin API (Register).
func (f *Frontend) HTTP() http.Handler { return f.httpHandler() }
