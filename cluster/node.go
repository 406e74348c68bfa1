package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/cluster/gossip"
	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/cluster/peer"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
	"github.com/quorate/quorate/rpc/codec"
	"github.com/quorate/quorate/shard"
	"github.com/quorate/quorate/telemetry"
)

// Node is one quorate node: its lifecycle, gossip, and the record it
// follows. Run creates and runs it.
//
// Concurrency: cfg, log, metrics, clock, sec, host, engine, front, the
// servers and the channels are set in Run before any goroutine starts and
// never change. The record and its routing are guarded by mu. The rest
// are atomics (policies, policiesSynced, ready, fenced, moving, probe) or
// owned by one goroutine (savedEpoch: followRecord's). The groups, the
// WAL, the transport and the leader hints are the host's (shard.Host),
// which guards its own.
type Node struct {
	cfg     Config
	log     *slog.Logger
	metrics *telemetry.Metrics
	clock   func() time.Time
	// decided keeps the node's recent decisions for operators.
	decided *decisions

	grpc   *grpc.Server
	sec    *nodeSecurity
	host   *shard.Host
	front  Frontend
	gossip *gossip.Gossip
	peers  *peer.Set
	probe  atomic.Uint32 // turns replicaFor through a shard's replicas

	mu struct {
		sync.RWMutex
		rec  *meta.Record // nil until the cluster is bootstrapped
		ring *ring.Ring   // from rec
		// ringChanged is closed, and replaced, when ring changes.
		ringChanged chan struct{}
	}
	metaFSM meta.FSM
	// policies is the compiled policy set the meta replica last applied
	// (policystore.go); never nil once Run starts.
	policies atomic.Pointer[policy.Snapshot]
	// engine decides checks (package decide) with the node's shards,
	// policies and lease table.
	engine *decide.Engine
	// policiesSynced: the meta replica has caught up with the meta leader
	// since the node started (syncPolicies); descriptor checks wait for it.
	policiesSynced atomic.Bool
	// policyWait says what syncPolicies waits for, while it does.
	policyWait atomic.Pointer[string]
	ready      atomic.Bool
	// stopping is closed when the node begins to stop: its CheckStreams
	// end then, rather than holding the graceful stop open.
	stopping chan struct{}

	// ctx is the node's life; exit ends it (a node that left the cluster
	// or was removed from it stops by itself).
	ctx  context.Context
	exit context.CancelFunc
	// recordCh nudges followRecord when the meta replica applies a record
	// change (reconcile.go).
	recordCh  chan struct{}
	left      chan struct{} // closed once the record says this node left
	leftOnce  sync.Once
	fenceOnce sync.Once
	fenced    atomic.Value // error: why this node must not serve
	moving    atomic.Bool  // the mover runs (mover.go)
	// savedEpoch is the epoch of the record on disk (followRecord's).
	savedEpoch uint64
	// background counts the loops that open and close groups
	// (followRecord), which shutdown waits for.
	background sync.WaitGroup

	// tenantSnaps asks for meta snapshots after tenant changes (tenants.go).
	tenantSnaps tenantSnapshots
}

// Run starts the node described by cfg and serves until ctx is cancelled,
// then shuts down gracefully, handing off leadership of the groups it leads.
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("cluster: data dir: %w", err)
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), metrics: telemetry.New()}
	var err error
	if n.decided, err = newDecisions(cfg.NodeID, n.metrics.Registry(), cfg.DecisionLog); err != nil {
		return err
	}
	defer n.decided.close() // at shutdown already; here for a node that never ran
	if n.sec, err = loadSecurity(&n.cfg); err != nil {
		return err
	}
	n.clock = func() time.Time { return time.Now().Add(cfg.ClockOffset) }
	n.stopping = make(chan struct{})
	empty, err := policy.Compile(nil, nil, 0)
	if err != nil {
		return err
	}
	n.policies.Store(empty)
	n.metaFSM.OnPolicies = n.swapPolicies
	n.metaFSM.OnTenants = n.swapTenants
	n.recordCh = make(chan struct{}, 1)
	n.left = make(chan struct{})
	n.metaFSM.OnRecord = n.recordChanged
	n.mu.ringChanged = make(chan struct{})
	n.engine = decide.New(n.engineConfig())
	defer n.engine.Close() // at shutdown already; here for a node that never ran
	n.metrics.WatchLeases(n.engine.Leases())
	n.metrics.WatchHealth(n.shardsWithoutLeader, n.engine.OpenBreakers)
	n.watchReplication()
	n.observeHistory()
	// The node's own life is not the caller's: a caller's stop first lets
	// --leave-on-terminate move the replicas away while every loop of the
	// node still runs, and only then ends it.
	life, exit := context.WithCancel(context.WithoutCancel(ctx))
	n.exit = exit
	defer exit()
	go func() {
		select {
		case <-ctx.Done():
			n.leaveOnTerminate()
			exit()
		case <-life.Done():
		}
	}()
	err = n.run(life)
	if why, ok := n.fenced.Load().(error); ok {
		return why
	}
	return err
}

func (n *Node) run(ctx context.Context) error {
	rpcLis, err := net.Listen("tcp", n.cfg.RPCAddr)
	if err != nil {
		return fmt.Errorf("cluster: --rpc: %w", err)
	}
	httpLis, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		rpcLis.Close()
		return fmt.Errorf("cluster: --http: %w", err)
	}
	n.front = Frontend(bareFrontend{})
	if n.cfg.Frontend != nil {
		n.front = n.cfg.Frontend(n)
	}
	n.grpc = grpc.NewServer(append(append([]grpc.ServerOption{n.sec.publicCreds()}, n.front.ServerOptions()...), codec.ServerOptions(n.publicBounds())...)...)
	// Peers are dialled from this node's own peer address (see localIP).
	dialFrom := gossip.GRPCDialer(gossip.LocalIP(n.cfg.PeerAddr))
	n.host = n.newHost(n.sec.peerDialOption(), dialFrom)
	n.countSuppressedRaftLogs()
	peerSrv, peerLis, err := n.servePeers(codec.ServerOptions(n.peerBounds())...)
	if err != nil {
		rpcLis.Close()
		httpLis.Close()
		return err
	}
	n.front.Register(n.grpc)
	n.peers = peer.NewSet(n.metrics, dialFrom, n.sec.peerDialOption())
	httpSrv := &http.Server{Handler: n.front.HTTP(), ReadHeaderTimeout: 5 * time.Second}

	n.gossip, err = gossip.Start(gossip.Config{NodeID: n.cfg.NodeID, Addr: n.cfg.GossipAddr,
		RPC: n.cfg.RPCAddr, Peer: n.cfg.PeerAddr, HTTP: n.cfg.HTTPAddr, Keys: n.sec.gossipKeys, Logger: n.cfg.Logger})
	if err != nil {
		rpcLis.Close()
		httpLis.Close()
		peerLis.Close()
		return fmt.Errorf("cluster: --gossip: %w", err)
	}

	g, gctx := errgroup.WithContext(ctx)
	n.ctx = gctx
	g.Go(func() error { return n.grpc.Serve(rpcLis) })
	g.Go(func() error { return peerSrv.Serve(peerLis) })
	go n.watchSecurity(gctx)
	g.Go(func() error {
		if err := httpSrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		n.gossip.Join(n.cfg.Join, gctx.Done())
		return nil
	})
	var startErr error // the start's failure, which ends the node
	g.Go(func() error {
		if err := n.start(gctx); err != nil && gctx.Err() == nil {
			// The servers stop too: they would serve on, and the node
			// never return.
			startErr = err
		} else {
			<-gctx.Done()
		}
		n.background.Wait() // no group opens or closes while shutdown closes them
		n.shutdown(httpSrv)
		return startErr
	})
	err = g.Wait()
	if startErr != nil {
		return startErr // the servers' stopping may have been reported first
	}
	if errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// start finds or creates the cluster record, then opens (and, at
// bootstrap, creates) this node's groups, and follows the record from then
// on.
func (n *Node) start(ctx context.Context) error {
	rec, err := loadRecord(n.cfg.DataDir)
	if err != nil {
		return err
	}
	seal, bootstrap := "", false
	if rec == nil {
		if rec, seal, err = n.awaitBootstrap(ctx); err != nil {
			return err
		}
		bootstrap = seal != ""
		if err := saveRecord(n.cfg.DataDir, rec); err != nil {
			return fmt.Errorf("cluster: saving the cluster record: %w", err)
		}
		if bootstrap {
			n.log.Info("bootstrapping cluster", "nodes", len(rec.Nodes), "shards", rec.Shards, "replicas", rec.Replicas)
		}
	} else {
		if err := n.stillMember(ctx, rec); err != nil {
			return err
		}
		// A record no change was made to may be one this node saved and
		// crashed before bootstrapping its groups with.
		bootstrap = rec.Epoch == 0
		n.log.Info("rejoining cluster from disk", "shards", rec.Shards, "epoch", rec.Epoch)
	}
	if err := n.openGroups(rec, bootstrap); err != nil {
		return err
	}
	n.savedEpoch = rec.Epoch
	n.gossip.SetEpoch(rec.Epoch)
	n.gossip.SetBootstrapped(seal)
	n.background.Go(func() { n.followRecord(ctx) })
	go n.watchEpochs(ctx)
	go n.syncPolicies(ctx)
	go n.watchReady(ctx)
	go n.decided.tick(ctx, n.clock)
	go n.balanceLeaders(ctx, time.Second)
	go func() {
		select {
		case <-n.left:
			time.Sleep(time.Second) // let the Leave call answer
			n.log.Info("this node left the cluster: stopping")
			n.exit()
		case <-ctx.Done():
		}
	}()
	return nil
}

// awaitBootstrap waits until BootstrapExpect nodes have met through gossip
// and agreed on the record they all compute (bootstrap.go), and returns it
// with the seal to advertise; or, if its peers are bootstrapped without
// it, joins their cluster and returns the record the join made (no seal).
func (n *Node) awaitBootstrap(ctx context.Context) (*meta.Record, string, error) {
	for {
		changed := n.gossip.Changes()
		st := decideBoot(n.cfg.NodeID, n.cfg.BootstrapExpect, n.cfg.Shards, n.cfg.Replicas, n.gossip.Alive())
		if st.rec != nil {
			return st.rec, st.seal, nil
		}
		if st.ready != "" && n.gossip.SetReady(st.ready) {
			continue // this node's own view now includes it
		}
		if st.lockedOut {
			n.log.Info("the cluster is bootstrapped already: joining it")
			rec, err := n.joinCluster(ctx)
			return rec, "", err
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

// newHost makes the node's Raft plumbing (package shard).
func (n *Node) newHost(dial ...grpc.DialOption) *shard.Host {
	return shard.NewHost(shard.HostConfig{
		NodeID: n.cfg.NodeID, Addr: n.cfg.PeerAddr, DataDir: n.cfg.DataDir, DialOptions: dial,
		LogStore: n.cfg.LogStore, HeartbeatTimeout: n.cfg.RaftHeartbeatTimeout,
		BatchMax: n.cfg.BatchMax, BatchWait: n.cfg.BatchWait, MaxInflight: n.cfg.BatchInflight,
		Clock: n.clock, Observer: n.metrics, WALObserver: n.metrics,
		Logf:     func(format string, args ...any) { n.log.Warn(fmt.Sprintf(format, args...)) },
		OnLeader: n.newLeader,
	})
}

// peersOf are the nodes ids of rec as group members.
func peersOf(rec *meta.Record, ids []string) []shard.Peer {
	out := make([]shard.Peer, len(ids))
	for i, id := range ids {
		info, _ := rec.Node(id)
		out[i] = shard.Peer{ID: id, Addr: info.Peer}
	}
	return out
}

// openGroups opens the meta group and every shard this node replicates.
// With bootstrap (a record this node computed with its bootstrap peers, or
// reopened from disk before any change was made to it) it bootstraps them,
// a no-op for groups that already have state; a node that joined or
// follows a changed record never bootstraps: the groups' leaders add it.
func (n *Node) openGroups(rec *meta.Record, bootstrap bool) error {
	r, err := rec.Ring()
	if err != nil {
		return err
	}
	if err := n.host.Open(); err != nil {
		return err
	}
	if rec.Member(n.cfg.NodeID) { // every member has a meta replica
		var boot []shard.Peer
		if bootstrap && slices.Contains(rec.MetaVoters(), n.cfg.NodeID) {
			boot = peersOf(rec, rec.MetaVoters())
		}
		if _, err := n.host.OpenMeta(&n.metaFSM, boot); err != nil {
			return err
		}
	}
	for s, reps := range rec.Placement {
		if !rec.Wants(n.cfg.NodeID, s) {
			continue
		}
		boot := n.splitBoot(rec, s)
		if bootstrap {
			boot = peersOf(rec, reps)
		}
		if _, err := n.host.OpenShard(s, boot); err != nil {
			return err
		}
	}
	n.mu.Lock()
	n.setRoutingLocked(rec, r)
	n.mu.Unlock()
	return nil
}

// newLeader follows a group's leader changes (shard.HostConfig.OnLeader):
// metrics, the shard's breaker, and the meta leader's duties.
func (n *Node) newLeader(group string, s int, leader string) {
	n.metrics.Leader(group, leader == n.cfg.NodeID)
	switch {
	case s >= 0 && leader != "":
		n.engine.LeaderChanged(s)
	case s < 0 && leader == n.cfg.NodeID:
		go n.storeRecord()
		go n.leadMeta() // mover.go
	}
}

// storeRecord writes this node's record into the meta group if the group
// has none yet.
func (n *Node) storeRecord() {
	g := n.host.Meta()
	if g == nil || n.metaFSM.Record() != nil {
		return
	}
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	if rec == nil {
		return
	}
	b, _ := json.Marshal(rec)
	if _, err := g.Apply(b, 5*time.Second); err != nil {
		n.log.Warn("storing the cluster record in the meta group", "err", err)
	}
}

// watchReady marks the node ready (gRPC health SERVING, /readyz 200) once
// every shard has a known leader, and not ready while any has none; while
// it is not, it says why every notReadyEvery.
func (n *Node) watchReady(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var say throttle
	for {
		ok := n.routable()
		if !ok {
			n.learnLeaders(ctx)
			ok = n.routable()
		}
		if !ok && say.due(time.Now(), notReadyEvery) {
			n.log.Info("not ready: " + n.notReadyWhy())
		}
		if ok != n.ready.Load() {
			n.ready.Store(ok)
			if ok {
				n.log.Info("ready: every shard has a leader and the policies are in sync")
			}
			n.front.SetServing(ok)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// routable reports whether every shard has a leader this node knows of.
func (n *Node) routable() bool {
	n.mu.RLock()
	rg := n.mu.ring
	n.mu.RUnlock()
	if rg == nil || !n.policiesSynced.Load() {
		return false
	}
	// Only shards that own keys: the child of a split in progress elects
	// its leader meanwhile, and no check waits for it.
	for _, b := range rg.Bounds() {
		if n.leaderOf(b.Shard) == "" {
			return false
		}
	}
	return true
}

// shutdown hands off leadership, closes the groups, leaves gossip and stops
// the servers.
func (n *Node) shutdown(httpSrv *http.Server) {
	n.ready.Store(false)
	n.front.Shutdown()
	close(n.stopping)
	n.engine.Close() // return unused budgets while the shards still take them
	n.decided.close()
	// Leadership handed over and every group closed, which also ends the
	// Raft streams live peers hold open to this node: the graceful stop
	// below would wait for them until its timeout.
	n.host.Close()
	n.gossip.Leave()
	n.peers.Close()
	stopped := make(chan struct{})
	go func() {
		n.grpc.GracefulStop()
		n.sec.peer.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		n.grpc.Stop()
		n.sec.peer.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(ctx)
	n.log.Info("stopped")
}

// metaReplica returns this node's meta replica, nil if it has none.
func (n *Node) metaReplica() *shard.Group { return n.host.Meta() }

// leaderOf returns the shard's leader as this node knows it: its own
// replica's view when it has one, else the last hint.
func (n *Node) leaderOf(s int) string { return n.host.Leader(s) }

// shardsWithoutLeader counts the shards this node replicates whose leader
// it does not know.
func (n *Node) shardsWithoutLeader() int {
	rec := n.record()
	if rec == nil {
		return 0
	}
	c := 0
	for id, reps := range rec.Placement {
		if slices.Contains(reps, n.cfg.NodeID) && n.leaderOf(id) == "" {
			c++
		}
	}
	return c
}

// record is the record this node follows, nil until its groups are open.
func (n *Node) record() *meta.Record {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.rec
}

// setRoutingLocked installs a record and its routing; a routing change
// wakes the checks waiting for one (a split's child took its range).
// Guarded by mu.
func (n *Node) setRoutingLocked(rec *meta.Record, r *ring.Ring) {
	changed := n.mu.ring == nil || !slices.Equal(n.mu.ring.Bounds(), r.Bounds())
	n.mu.rec, n.mu.ring = rec, r
	if n.host != nil {
		names := make(map[string]string, len(rec.Nodes))
		for _, info := range rec.Nodes {
			names[info.Peer] = info.ID
		}
		n.host.SetPeerNames(names) // the raft log names nodes, not addresses
	}
	if changed {
		close(n.mu.ringChanged)
		n.mu.ringChanged = make(chan struct{})
	}
}

// engineConfig wires the decision engine to this node: its shards, its
// policy set, its lease table's settings and its clock.
func (n *Node) engineConfig() decide.Config {
	c := &n.cfg
	return decide.Config{
		Shards:   nodeShards{n},
		Policies: n,
		Lease: &lease.Config{
			Holder: c.NodeID, TTL: c.LeaseTTL, CreditTTL: c.creditTTL(), RenewInterval: c.LeaseRenewInterval,
			AcquireWait: c.LeaseAcquireWait, SubmitTimeout: c.CheckTimeout, Workers: 8, Metrics: n.metrics,
		},
		Limits:          decide.Limits{MaxRequestItems: c.MaxRequestItems, MaxRequestCost: c.MaxRequestCost},
		CheckTimeout:    c.CheckTimeout,
		BreakerFailures: c.BreakerFailures,
		BreakerCooldown: c.BreakerCooldown,
		Clock:           n.clock,
		Observer:        n.metrics,
		Recorder:        n.decided,
		DenyCache:       max(0, c.DenyCache),
	}
}

// The node's metrics count the deny cache's work.
var _ decide.DenyCacheObserver = (*telemetry.Metrics)(nil)
