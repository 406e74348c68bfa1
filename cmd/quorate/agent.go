package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/quorate/quorate/cluster"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/shard"
)

// agentFlags are the flags of "quorate agent", one per cluster.Config field.
type agentFlags struct {
	nodeID          string
	dataDir         string
	rpcAddr         string
	httpAddr        string
	gossipAddr      string
	join            []string
	bootstrapExpect int
	shards          int
	replicas        int
	checkTimeout    time.Duration
	streamInFlight  int
	denyCache       int
	batchMax        int
	batchInflight   int
	batchWait       time.Duration
	logStore        string
	raftHeartbeat   time.Duration
	logLevel        string
	clockOffset     time.Duration
	leaseTTL        time.Duration
	leaseRenew      time.Duration
	leaseWait       time.Duration
	leaseCredits    bool
	deadNodeGrace   time.Duration
	maxMoves        int
	leaveOnTerm     bool
	leaveTimeout    time.Duration
	tierFrom        string
	limits          limitFlags // agent_limits.go
	security        securityFlags
	telemetry       telemetryFlags // agent_telemetry.go
}

func (a *app) agentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run one quorate node",
		Long: `Run one quorate node until SIGINT or SIGTERM, then shut it down gracefully.

Every node of a cluster runs an agent. The first time, start each with
--join pointing at the others' gossip addresses and the same
--bootstrap-expect; the cluster creates its groups once that many nodes have
met. A restarted node rejoins from its --data directory.`,
		Example: `  quorate agent --node-id n1 --data ./data/n1 \
    --rpc 127.0.0.1:7401 --http 127.0.0.1:7501 --gossip 127.0.0.1:7301 \
    --join 127.0.0.1:7302,127.0.0.1:7303 --bootstrap-expect 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config(a.stderr)
			if err != nil {
				return usageError(err)
			}
			cfg.Security.Reload = reloadSignal()
			stopTracing, err := f.telemetry.startTracing(cmd.Context(), cfg.NodeID)
			if err != nil {
				return usageError(err)
			}
			defer flushTracing(stopTracing)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := a.runNode(ctx, cfg); err != nil {
				return failure(err)
			}
			return nil
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// register defines the agent's flags on fl, bound to f.
func (f *agentFlags) register(fl *pflag.FlagSet) {
	fl.SortFlags = false
	fl.StringVar(&f.nodeID, "node-id", "", "stable id of this node, unique in the cluster (required)")
	fl.StringVar(&f.dataDir, "data", "", "directory for this node's Raft groups and cluster record (required)")
	fl.StringVar(&f.rpcAddr, "rpc", "127.0.0.1:7401", "gRPC address, host:port; peers and clients dial it, so not 0.0.0.0")
	fl.StringVar(&f.httpAddr, "http", "127.0.0.1:7501", "HTTP address for /healthz, /readyz and /metrics")
	fl.StringVar(&f.gossipAddr, "gossip", "127.0.0.1:7301", "gossip address (TCP and UDP), host:port")
	fl.StringSliceVar(&f.join, "join", nil, "gossip addresses of other nodes to join, comma-separated or repeated")
	fl.IntVar(&f.bootstrapExpect, "bootstrap-expect", 3, "number of nodes that must meet before the cluster bootstraps")
	fl.IntVar(&f.shards, "shards", 0, "number of shard groups created at bootstrap (0: one per --bootstrap-expect node); quorate split raises it later")
	fl.IntVar(&f.replicas, "replicas", 3, "replicas per shard")
	fl.DurationVar(&f.checkTimeout, "check-timeout", time.Second, "deadline of a check whose caller set none")
	fl.IntVar(&f.streamInFlight, "stream-max-inflight", 1024, "most checks of one CheckStream read and not yet answered; at the bound the node stops reading the stream")
	fl.IntVar(&f.denyCache, "deny-cache", cluster.DefaultDenyCache, "strict denials remembered, so that a hot key over its limit is denied from memory until its retry-after instead of with a Raft commit per check (0: off)")
	fl.IntVar(&f.batchMax, "batch-max", 1024, "most operations per group-commit batch (one Raft entry)")
	fl.IntVar(&f.batchInflight, "batch-inflight", 4, "most batches of one shard proposed and not yet committed; while they are, new operations wait and join the next batch")
	fl.DurationVar(&f.batchWait, "batch-wait", 2*time.Millisecond, "how long a batch may wait for more operations when its shard is busy (the previous batch carried several requests; a lightly loaded shard never waits; 0: never)")
	fl.DurationVar(&f.raftHeartbeat, "raft-heartbeat-timeout", shard.DefaultHeartbeatTimeout, "how long a follower waits for its leader before an election (leaders heartbeat every tenth of it): shorter fails over faster, and costs idle CPU")
	fl.StringVar(&f.logStore, "log-store", "wal", "where Raft log entries go: wal (one write-ahead log per node, shared by its groups) or bolt (raft-boltdb per group); switching moves the entries at start")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.DurationVar(&f.leaseTTL, "lease-ttl", 5*time.Second, "how long leased budget may be spent; the longest a dead node strands it")
	fl.DurationVar(&f.leaseRenew, "lease-renew-interval", 500*time.Millisecond, "demand window one lease covers, and the period of demand estimation")
	fl.DurationVar(&f.leaseWait, "lease-acquire-wait", 250*time.Millisecond, "how long a leased check without budget waits for the grant that carries it before it is decided strictly")
	fl.BoolVar(&f.leaseCredits, "lease-credits", true, "ask shards for credits, so the first leased check of a key on a node needs no grant (--lease-credits=false: every key's first leased check waits for its lease)")
	fl.DurationVar(&f.deadNodeGrace, "dead-node-grace", 5*time.Minute, "how long gossip must report a node dead before its replicas are rebuilt on the other nodes; a replaced node that comes back refuses to serve")
	fl.IntVar(&f.maxMoves, "max-moves", 4, "most replica moves in progress at once when nodes join, leave or are replaced")
	fl.BoolVar(&f.leaveOnTerm, "leave-on-terminate", false, "on SIGTERM, leave the cluster (move this node's replicas away) before stopping")
	fl.DurationVar(&f.leaveTimeout, "leave-timeout", 10*time.Minute, "how long --leave-on-terminate waits for the replicas to move before stopping anyway")
	fl.StringVar(&f.tierFrom, "tenant-tier-from", "assignment", "whose tenant_tier decides a check that carries one for a tenant the tenant assignment puts on a plan: assignment (the operator's record wins) or request (the caller's claim wins; the assignment fills in a missing tier); set it alike on every node")
	f.limits.register(fl)
	fl.DurationVar(&f.clockOffset, "debug-clock-offset", 0, "shift this node's clock (testing the state machine's time clamp only)")
	f.security.register(fl)
	f.telemetry.register(fl)
}

// config turns the flags into a cluster.Config whose Logger writes text to
// logOut. Every error names the flag at fault.
func (f *agentFlags) config(logOut io.Writer) (cluster.Config, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return cluster.Config{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	for _, n := range []struct {
		flag string
		v    int
		min  int
	}{
		{"--bootstrap-expect", f.bootstrapExpect, 1},
		{"--shards", f.shards, 0},
		{"--replicas", f.replicas, 1},
		{"--batch-max", f.batchMax, 1},
		{"--batch-inflight", f.batchInflight, 1},
		{"--stream-max-inflight", f.streamInFlight, 1},
		{"--max-moves", f.maxMoves, 1},
		{"--deny-cache", f.denyCache, 0},
	} {
		if n.v < n.min {
			return cluster.Config{}, fmt.Errorf("%s %d: must be at least %d", n.flag, n.v, n.min)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--check-timeout", f.checkTimeout},
		{"--batch-wait", f.batchWait},
		{"--dead-node-grace", f.deadNodeGrace},
		{"--leave-timeout", f.leaveTimeout},
	} {
		if d.v < 0 || (d.flag != "--batch-wait" && d.v == 0) {
			return cluster.Config{}, fmt.Errorf("%s %v: must be positive", d.flag, d.v)
		}
	}
	if f.raftHeartbeat < 50*time.Millisecond {
		return cluster.Config{}, fmt.Errorf("--raft-heartbeat-timeout %v: must be at least 50ms (leaders heartbeat every tenth of it)", f.raftHeartbeat)
	}
	if f.logStore != shard.LogStoreWAL && f.logStore != shard.LogStoreBolt {
		return cluster.Config{}, fmt.Errorf("--log-store %q: want %s or %s", f.logStore, shard.LogStoreWAL, shard.LogStoreBolt)
	}
	tierFrom, ok := map[string]policy.TierSource{"assignment": policy.TierFromAssignment, "request": policy.TierFromRequest}[f.tierFrom]
	if !ok {
		return cluster.Config{}, fmt.Errorf("--tenant-tier-from %q: want assignment or request", f.tierFrom)
	}
	limits, err := f.limits.limits()
	if err != nil {
		return cluster.Config{}, err
	}
	var join []string
	for _, j := range f.join {
		if j = strings.TrimSpace(j); j != "" {
			join = append(join, j)
		}
	}
	cfg := cluster.Config{
		NodeID:               strings.TrimSpace(f.nodeID),
		DataDir:              f.dataDir,
		RPCAddr:              f.rpcAddr,
		HTTPAddr:             f.httpAddr,
		GossipAddr:           f.gossipAddr,
		Join:                 join,
		BootstrapExpect:      f.bootstrapExpect,
		Shards:               f.shards,
		Replicas:             f.replicas,
		CheckTimeout:         f.checkTimeout,
		StreamMaxInFlight:    f.streamInFlight,
		DenyCache:            denyCache(f.denyCache),
		BatchMax:             f.batchMax,
		BatchInflight:        f.batchInflight,
		BatchWait:            f.batchWait,
		LogStore:             f.logStore,
		RaftHeartbeatTimeout: f.raftHeartbeat,
		ClockOffset:          f.clockOffset,
		LeaseTTL:             f.leaseTTL,
		LeaseRenewInterval:   f.leaseRenew,
		LeaseAcquireWait:     f.leaseWait,
		DisableLeaseCredits:  !f.leaseCredits,
		DeadNodeGrace:        f.deadNodeGrace,
		MaxMoves:             f.maxMoves,
		LeaveOnTerminate:     f.leaveOnTerm,
		LeaveTimeout:         f.leaveTimeout,
		TenantTier:           tierFrom,
		Logger:               slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})),
		Limits:               limits,
		Frontend:             frontend,
	}
	f.security.apply(&cfg)
	if cfg.DecisionLog, err = f.telemetry.decisionLogConfig(); err != nil {
		return cluster.Config{}, err
	}
	// Admin actions are logged whatever --log-level says.
	cfg.Security.Audit = slog.New(slog.NewTextHandler(logOut, nil))
	if err := cfg.Validate(); err != nil {
		// The cluster package names the flag; drop its sentinel's prefix,
		// which means nothing on a command line.
		if msg, ok := strings.CutPrefix(err.Error(), cluster.ErrConfig.Error()+": "); ok {
			return cluster.Config{}, errors.New(msg)
		}
		return cluster.Config{}, err
	}
	return cfg, nil
}

// denyCache is --deny-cache as cluster.Config counts it: 0 there is the
// default, and negative is off.
func denyCache(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
