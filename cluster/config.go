package cluster

import (
	"errors"
	"fmt"
	"github.com/quorate/quorate/telemetry/decisionlog"
	"log/slog"
	"net"
	"time"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
)

// Config describes one node. Zero values take the defaults.
type Config struct {
	// NodeID names the node in the cluster; it must be stable across restarts.
	NodeID string
	// DataDir holds the node's Raft groups and its cluster record.
	DataDir string
	// RPCAddr is the public gRPC address (RateLimiter, Admin, health),
	// host:port; clients and the routed client dial it, so it must not be
	// 0.0.0.0.
	RPCAddr string
	// PeerAddr serves the node-to-node services (forwarding and Raft) to
	// nodes only: callers must present a node certificate (security.go).
	PeerAddr string
	// HTTPAddr serves the front end's HTTP handler: /healthz, /readyz,
	// /metrics and the HTTP/JSON API.
	HTTPAddr string
	// Frontend makes the node's public surface once the node exists: the
	// gRPC services and HTTP handler (package api) live above this package
	// and are wired in by the binary. Nil serves none.
	Frontend func(n *Node) Frontend
	// DecisionLog configures the decision log: its sinks, the fraction of
	// allows it keeps, its buffer. With no sinks it serves live tails only
	// (quorate tail). The node sets its registry and id.
	DecisionLog decisionlog.Config
	// GossipAddr is the memberlist address (TCP and UDP).
	GossipAddr string
	// Join lists gossip addresses of other nodes to contact at start.
	Join []string
	// BootstrapExpect is how many nodes must have met before the cluster
	// creates its groups, exactly once (default 3).
	BootstrapExpect int
	// Shards is the number of shard groups created at bootstrap (default:
	// BootstrapExpect, one shard leader per node). Each group costs its
	// heartbeats, replication streams and pipeline whether busy or not, and
	// more groups split the load into smaller, costlier log entries (the
	// README's "The write path" has the measurements).
	Shards int
	// Replicas is each shard's replication factor (default 3).
	Replicas int
	// CheckTimeout bounds a check (default 1s). A caller's deadline bounds
	// it too, less a reserve for the answer's way back (deadline.go).
	CheckTimeout time.Duration
	// DenyCache is how many recent strict denials the node remembers, to
	// deny a hot key over its limit from memory until the denial's
	// retry-after instead of with a Raft commit per check (decide's deny
	// cache; default DefaultDenyCache). Negative turns it off.
	DenyCache int
	// StreamMaxInFlight bounds the checks of one CheckStream read and not
	// yet answered; at the bound the node stops reading the stream
	// (default 1024).
	StreamMaxInFlight int
	// BatchMax, BatchWait and BatchInflight tune each shard's group commit
	// (shard.Config's BatchMax, BatchWait and MaxInflight).
	BatchMax      int
	BatchWait     time.Duration
	BatchInflight int
	// LogStore is where the node's Raft groups keep their log entries:
	// "wal" (default), one write-ahead log under DataDir/wal shared by
	// every group, so concurrent appends share a write and an fsync; or
	// "bolt", raft-boltdb in each group's raft.db. Switching moves a group's
	// entries at its next start.
	LogStore string
	// RaftHeartbeatTimeout is every group's raft heartbeat and election
	// timeout (0: shard.DefaultHeartbeatTimeout): shorter fails over
	// faster, and costs idle CPU in heartbeats.
	RaftHeartbeatTimeout time.Duration
	// LeaseTTL is how long a leased budget may be spent (default 5s): the
	// longest a dead node strands its budget, and how long an idle bucket's
	// budget is kept before it is returned.
	LeaseTTL time.Duration
	// LeaseRenewInterval is the demand window a lease covers and the period
	// of demand estimation (default 500ms).
	LeaseRenewInterval time.Duration
	// LeaseAcquireWait is how long a leased check that found no budget waits
	// for the grant that brings it before it is decided strictly instead
	// (default 250ms). The grant is a Raft commit like the strict check, and
	// carries the check's cost, so waiting costs no more than the fallback
	// would; the bound only cuts short a grant stuck behind a slow shard.
	LeaseAcquireWait time.Duration
	// DisableLeaseCredits turns off shard credits: the first leased check
	// of a key on a node then waits for the key's first lease grant.
	// Credits are asked for with a lifetime of four lease TTLs (at most 1m).
	DisableLeaseCredits bool
	// DeadNodeGrace is how long gossip must report a node dead before the
	// meta leader replaces it, rebuilding its replicas on the other nodes
	// (default 5m). A replaced node that comes back refuses to serve; it
	// rejoins only with an empty data dir.
	DeadNodeGrace time.Duration
	// MaxMoves bounds the replica moves in progress at once (default 4):
	// each costs its group a snapshot install or log catch-up.
	MaxMoves int
	// LeaveOnTerminate makes a graceful stop leave the cluster first: the
	// node's replicas are moved to the others before it exits.
	LeaveOnTerminate bool
	// LeaveTimeout bounds that leave (default 10m).
	LeaveTimeout time.Duration
	// TenantTier says whose tenant_tier counts when a check carries one
	// and its tenant has an assignment too (default: the assignment's).
	// Set it alike on every node.
	TenantTier policy.TierSource
	// ClockOffset shifts this node's clock, for testing the state machine's
	// time clamp. Never set it in production.
	ClockOffset time.Duration
	// Logger receives the node's logs (default slog.Default()).
	Logger *slog.Logger
	// Limits bound requests and set the breaker (limits.go).
	Limits
	// Security holds the node's credentials (security.go).
	Security SecurityConfig
}

// creditTTL is the lifetime a node asks for its shard credits: longer than a
// lease's, because a credit costs its shard a commit per node and is never
// returned, and a dead node strands nothing with it.
func (c *Config) creditTTL() time.Duration {
	if c.DisableLeaseCredits {
		return 0
	}
	return min(4*c.LeaseTTL, time.Minute)
}

// DefaultDenyCache is the deny cache's default size: 64k buckets, 16 MB
// when full (243 bytes an entry, measured with runtime.MemStats).
const DefaultDenyCache = 1 << 16

// Errors returned when a Config is invalid.
var (
	ErrConfig = errors.New("cluster: invalid config")
)

func (c *Config) setDefaults() {
	if c.BootstrapExpect <= 0 {
		c.BootstrapExpect = 3
	}
	if c.Shards <= 0 {
		c.Shards = c.BootstrapExpect
	}
	if c.Replicas <= 0 {
		c.Replicas = 3
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = time.Second
	}
	if c.DenyCache == 0 {
		c.DenyCache = DefaultDenyCache
	}
	if c.StreamMaxInFlight <= 0 {
		c.StreamMaxInFlight = 1024
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 5 * time.Second
	}
	if c.LeaseRenewInterval <= 0 {
		c.LeaseRenewInterval = 500 * time.Millisecond
	}
	if c.LeaseAcquireWait <= 0 {
		c.LeaseAcquireWait = 250 * time.Millisecond
	}
	if c.DeadNodeGrace <= 0 {
		c.DeadNodeGrace = 5 * time.Minute
	}
	if c.MaxMoves <= 0 {
		c.MaxMoves = 4
	}
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Limits.setDefaults()
}

// Validate reports the first invalid field, by its flag name.
func (c *Config) Validate() error {
	if c.NodeID == "" {
		return fmt.Errorf("%w: --node-id is required", ErrConfig)
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: --data is required", ErrConfig)
	}
	for _, a := range []struct{ flag, addr string }{{"--rpc", c.RPCAddr}, {"--peer", c.PeerAddr}, {"--http", c.HTTPAddr}, {"--gossip", c.GossipAddr}} {
		host, port, err := net.SplitHostPort(a.addr)
		if err != nil || port == "" || port == "0" {
			return fmt.Errorf("%w: %s %q must be host:port with a fixed port", ErrConfig, a.flag, a.addr)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() && a.flag != "--http" {
			return fmt.Errorf("%w: %s %q: peers dial this address, so it must be a reachable IP, not %s", ErrConfig, a.flag, a.addr, host)
		}
	}
	if c.LeaseTTL > time.Minute || c.LeaseTTL < 2*c.LeaseRenewInterval {
		return fmt.Errorf("%w: --lease-ttl must be at most 1m and at least twice --lease-renew-interval", ErrConfig)
	}
	if c.MaxMoves > meta.MaxMoves {
		return fmt.Errorf("%w: --max-moves must be at most %d", ErrConfig, meta.MaxMoves)
	}
	if c.BootstrapExpect < 0 || c.Shards < 0 || c.Replicas < 0 {
		return fmt.Errorf("%w: --bootstrap-expect, --shards and --replicas must be positive", ErrConfig)
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	return c.Security.validate()
}
