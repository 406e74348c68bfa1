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
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
	"github.com/quorate/quorate/rpc/codec"
	"github.com/quorate/quorate/rpc/raftgrpc"
	"github.com/quorate/quorate/shard"
	"github.com/quorate/quorate/shard/raftlog"
)

const metaGroup = "meta"

func shardGroup(s int) string { return "shard-" + strconv.Itoa(s) }

// Node is one quorate node. Run creates and runs it.
type Node struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	clock   func() time.Time

	grpc    *grpc.Server
	sec     *nodeSecurity
	raftMgr *raftgrpc.Manager
	front   Frontend
	gossip  *gossip
	peers   *peers
	leaders leaderHints
	probe   atomic.Uint32 // turns replicaFor through a shard's replicas

	mu struct {
		sync.RWMutex
		rec  *meta.Record // nil until the cluster is bootstrapped
		ring *ring.Ring   // from rec
		// ringChanged is closed, and replaced, when ring changes.
		ringChanged chan struct{}
		shards      []*shard.Shard // by shard ID; nil where this node holds no replica
		meta        *shard.Group   // nil if this node is not a meta voter
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
	ready          atomic.Bool
	wal            *raftlog.WAL // the groups' shared log, set once they open
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
	// observers holds, per group ID, what stops observe's goroutine.
	observers sync.Map
	// background counts the loops that open and close groups
	// (followRecord), which shutdown waits for.
	background sync.WaitGroup
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
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), metrics: newMetrics()}
	var err error
	if n.sec, err = loadSecurity(&n.cfg); err != nil {
		return err
	}
	n.clock = func() time.Time { return time.Now().Add(cfg.ClockOffset) }
	n.leaders.m = map[int]string{}
	n.stopping = make(chan struct{})
	empty, err := policy.Compile(nil, nil, 0)
	if err != nil {
		return err
	}
	n.policies.Store(empty)
	n.metaFSM.OnPolicies = n.swapPolicies
	n.recordCh = make(chan struct{}, 1)
	n.left = make(chan struct{})
	n.metaFSM.OnRecord = n.recordChanged
	n.mu.ringChanged = make(chan struct{})
	n.engine = decide.New(n.engineConfig())
	n.metrics.WatchLeases(n.engine.Leases())
	n.watchReplication()
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
	dialFrom := grpcLocalDialer(localIP(n.cfg.PeerAddr))
	n.raftMgr = raftgrpc.NewManager(raft.ServerAddress(n.cfg.PeerAddr), n.sec.peerDialOption(), dialFrom)
	peerSrv, peerLis, err := n.servePeers(codec.ServerOptions(n.peerBounds())...)
	if err != nil {
		rpcLis.Close()
		httpLis.Close()
		return err
	}
	n.front.Register(n.grpc)
	n.peers = newPeers(n.metrics, dialFrom, n.sec.peerDialOption())
	httpSrv := &http.Server{Handler: n.front.HTTP(), ReadHeaderTimeout: 5 * time.Second}

	n.gossip, err = startGossip(&n.cfg, n.sec.gossipKeys)
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
		n.gossip.join(n.cfg.Join, gctx.Done())
		return nil
	})
	g.Go(func() error {
		err := n.start(gctx)
		if err != nil && gctx.Err() == nil {
			return err
		}
		<-gctx.Done()
		n.background.Wait() // no group opens or closes while shutdown closes them
		n.shutdown(httpSrv)
		return nil
	})
	err = g.Wait()
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
	n.gossip.setEpoch(rec.Epoch)
	n.gossip.setBootstrapped(seal)
	n.background.Go(func() { n.followRecord(ctx) })
	go n.watchEpochs(ctx)
	go n.syncPolicies(ctx)
	go n.watchReady(ctx)
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
		changed := n.gossip.changes()
		st := decideBoot(n.cfg.NodeID, n.cfg.BootstrapExpect, n.cfg.Shards, n.cfg.Replicas, n.gossip.alive())
		if st.rec != nil {
			return st.rec, st.seal, nil
		}
		if st.ready != "" && n.gossip.setReady(st.ready) {
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

func (n *Node) groupConfig(id string) (shard.GroupConfig, error) {
	trans, err := n.raftMgr.Transport(id)
	if err != nil {
		return shard.GroupConfig{}, err
	}
	return shard.GroupConfig{
		ID: id, NodeID: raft.ServerID(n.cfg.NodeID),
		Dir:              filepath.Join(n.cfg.DataDir, "shards", id),
		Transport:        trans,
		WAL:              n.wal,
		LogStore:         n.cfg.LogStore,
		HeartbeatTimeout: n.cfg.RaftHeartbeatTimeout,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: os.Stderr}),
	}, nil
}

func (n *Node) servers(rec *meta.Record, ids []string) []raft.Server {
	var out []raft.Server
	for _, id := range ids {
		info, _ := rec.Node(id)
		out = append(out, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(info.Peer)})
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
	shards := make([]*shard.Shard, rec.Shards)
	if n.wal, err = raftlog.Open(filepath.Join(n.cfg.DataDir, "wal"), raftlog.Options{
		Observer: n.metrics,
		Logf:     func(format string, args ...any) { n.log.Warn(fmt.Sprintf(format, args...)) },
	}); err != nil {
		return err
	}
	mg, err := n.openMeta(rec, bootstrap)
	if err != nil {
		return err
	}
	for s, reps := range rec.Placement {
		if !rec.Wants(n.cfg.NodeID, s) {
			continue
		}
		boot := n.splitBoot(rec, s)
		if bootstrap {
			boot = n.servers(rec, reps)
		}
		if shards[s], err = n.openShard(s, boot); err != nil {
			return err
		}
	}
	n.mu.Lock()
	n.mu.meta = mg
	n.setRoutingLocked(rec, r, shards)
	n.mu.Unlock()
	return nil
}

// openMeta opens this node's meta replica: every member has one.
func (n *Node) openMeta(rec *meta.Record, bootstrap bool) (*shard.Group, error) {
	if !rec.Member(n.cfg.NodeID) {
		return nil, nil
	}
	gc, err := n.groupConfig(metaGroup)
	if err != nil {
		return nil, err
	}
	mg, err := shard.OpenMachine(gc, &n.metaFSM)
	if err != nil {
		return nil, err
	}
	if bootstrap && contains(rec.MetaVoters(), n.cfg.NodeID) {
		if err := mg.Bootstrap(n.servers(rec, rec.MetaVoters())); err != nil {
			return nil, fmt.Errorf("cluster: bootstrapping %s: %w", metaGroup, err)
		}
	}
	n.observe(mg, -1)
	return mg, nil
}

// openShard opens this node's replica of shard s, bootstrapping it with
// boot if that is not empty.
func (n *Node) openShard(s int, boot []raft.Server) (*shard.Shard, error) {
	gc, err := n.groupConfig(shardGroup(s))
	if err != nil {
		return nil, err
	}
	sh, err := shard.Open(shard.Config{
		GroupConfig: gc, BatchMax: n.cfg.BatchMax, BatchWait: n.cfg.BatchWait, MaxInflight: n.cfg.BatchInflight,
		Clock: n.clock, Observer: n.metrics, FSM: fsm.Config{},
	})
	if err != nil {
		return nil, err
	}
	if len(boot) > 0 {
		if err := sh.Bootstrap(boot); err != nil {
			_ = sh.Close()
			return nil, fmt.Errorf("cluster: bootstrapping %s: %w", gc.ID, err)
		}
	}
	n.observe(sh.Group, s)
	return sh, nil
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// observe follows a group's leader changes: metrics, routing hints, and the
// meta leader's duty to store the record.
func (n *Node) observe(g *shard.Group, s int) {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	g.Raft().RegisterObserver(obs)
	n.observers.Store(g.ID(), func() {
		// Raft never closes an observer's channel; the goroutine below
		// would keep the group's whole state machine alive.
		g.Raft().DeregisterObserver(obs)
		close(ch)
		n.metrics.leader.DeleteLabelValues(g.ID())
	})
	go func() {
		for o := range ch {
			lo := o.Data.(raft.LeaderObservation)
			n.metrics.leaderChg.WithLabelValues(g.ID()).Inc()
			lead := 0.0
			if string(lo.LeaderID) == n.cfg.NodeID {
				lead = 1
			}
			n.metrics.leader.WithLabelValues(g.ID()).Set(lead)
			if s >= 0 {
				n.leaders.set(s, string(lo.LeaderID))
				if lo.LeaderID != "" {
					n.engine.LeaderChanged(s)
				}
			} else if lead == 1 {
				go n.storeRecord(g)
				go n.leadMeta() // mover.go
			}
		}
	}()
}

// storeRecord writes this node's record into the meta group if the group
// has none yet.
func (n *Node) storeRecord(g *shard.Group) {
	if n.metaFSM.Record() != nil {
		return
	}
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	if rec == nil {
		return
	}
	b, _ := json.Marshal(rec)
	if err := g.Raft().Apply(b, 5*time.Second).Error(); err != nil {
		n.log.Warn("storing the cluster record in the meta group", "err", err)
	}
}

// watchReady marks the node ready (gRPC health SERVING, /readyz 200) once
// every shard has a known leader, and not ready while any has none.
func (n *Node) watchReady(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ok := n.routable()
		if !ok {
			n.learnLeaders(ctx)
			ok = n.routable()
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
	n.mu.RLock()
	shards, mg := n.mu.shards, n.mu.meta
	n.mu.RUnlock()
	var wg sync.WaitGroup
	for _, sh := range shards {
		if sh != nil && sh.IsLeader() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := sh.TransferLeadership(); err != nil {
					n.log.Warn("leadership transfer", "group", sh.ID(), "err", err)
				}
			}()
		}
	}
	wg.Wait()
	for _, sh := range shards {
		if sh != nil {
			_ = sh.Close()
		}
	}
	if mg != nil {
		_ = mg.TransferLeadership()
		_ = mg.Close()
	}
	if n.wal != nil {
		_ = n.wal.Close() // after every group: raft appends until Shutdown
	}
	n.gossip.leave()
	n.peers.close()
	// Every group is closed: end the Raft streams live peers hold open to
	// this node, or the graceful stop below would wait for them until its
	// timeout.
	_ = n.raftMgr.Close()
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

// unobserve stops following a group this node closed.
func (n *Node) unobserve(id string) {
	if stop, ok := n.observers.LoadAndDelete(id); ok {
		stop.(func())()
	}
}

// metaReplica returns this node's meta replica, nil if it has none.
func (n *Node) metaReplica() *shard.Group {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.meta
}

// leaderHints remembers each shard's leader as learned from raft
// observations and from forwarding replies.
type leaderHints struct {
	mu sync.Mutex
	m  map[int]string // guarded by mu
}

func (h *leaderHints) set(s int, id string) {
	h.mu.Lock()
	h.m[s] = id
	h.mu.Unlock()
}

func (h *leaderHints) get(s int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[s]
}

// leaderOf returns the shard's leader as this node knows it: its own
// replica's view when it has one, else the last hint.
func (n *Node) leaderOf(s int) string {
	n.mu.RLock()
	var sh *shard.Shard
	if s < len(n.mu.shards) {
		sh = n.mu.shards[s]
	}
	n.mu.RUnlock()
	if sh != nil {
		if _, id := sh.Leader(); id != "" {
			return string(id)
		}
		// A replica a move is adding has heard from no leader yet, and one
		// a move removed hears from none any more: the last hint is better
		// than waiting.
	}
	if id := n.leaders.get(s); id != n.cfg.NodeID {
		return id
	}
	return "" // a hint from when this node had a replica that moved away
}

// setRoutingLocked installs a record, its routing and the groups open for
// it; a routing change wakes the checks waiting for one (a split's
// child took its range). Guarded by mu.
func (n *Node) setRoutingLocked(rec *meta.Record, r *ring.Ring, shards []*shard.Shard) {
	changed := n.mu.ring == nil || !slices.Equal(n.mu.ring.Bounds(), r.Bounds())
	n.mu.rec, n.mu.ring, n.mu.shards = rec, r, shards
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
	}
}
