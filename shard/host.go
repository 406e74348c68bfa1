package shard

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/rpc/raftgrpc"
	"github.com/quorate/quorate/shard/raftlog"
)

// MetaGroup names the meta group; ShardGroup names shard s's group.
const MetaGroup = "meta"

// ShardGroup names shard s's group.
func ShardGroup(s int) string { return "shard-" + strconv.Itoa(s) }

// HostConfig describes a node's Raft plumbing. Zero values take the
// defaults of Config and GroupConfig.
type HostConfig struct {
	NodeID  string
	Addr    string // the node's peer address: its groups' raft address
	DataDir string // groups under DataDir/shards/<group>, the WAL under DataDir/wal
	// DialOptions reach the peers' transports (credentials, the address
	// connections leave from).
	DialOptions      []grpc.DialOption
	LogStore         string
	HeartbeatTimeout time.Duration
	// The shard groups' group commit and clock (Config).
	BatchMax    int
	BatchWait   time.Duration
	MaxInflight int
	Clock       func() time.Time
	Observer    Observer // also a QueueObserver, if it is one
	WALObserver raftlog.Observer
	// Logf reports what the host does not return: a failed leadership
	// transfer at close, a shard's state it could not delete.
	Logf func(format string, args ...any)
	// OnLeader hears each leader change of a group the host holds: its
	// name, its shard (-1 for the meta group) and the new leader ("" while
	// none). It must not block.
	OnLeader func(group string, shard int, leader string)
	// RaftLog is where the groups' raft warnings and errors go (nil:
	// stderr), each unreachable peer reported once and then summarized
	// every PeerLogEvery (peerlog.go).
	RaftLog io.Writer
}

// Host is a node's Raft plumbing: the write-ahead log its groups share,
// the transport they speak over (one connection per peer, every group on
// it), the table of the groups it holds (the meta group and its shard
// replicas), and who leads each shard, from its own replicas or, for the
// shards it does not hold, from hints. The node decides which groups to
// hold; the host opens, closes and deletes them.
//
// The group table and the hints are guarded by mu; wal is set once by
// Open, before any group opens; the rest is set at construction.
type Host struct {
	cfg   HostConfig
	trans *raftgrpc.Manager
	wal   *raftlog.WAL
	peers *peerLog // the groups' raft logging

	mu struct {
		sync.RWMutex
		shards    []*Shard          // by shard ID; nil where the node holds no replica
		meta      *Group            // nil if the node holds no meta replica
		hints     map[int]string    // shard -> leader, for shards the node does not hold
		observers map[string]func() // group -> what stops its observer
	}
}

// NewHost makes a node's host; Open opens its WAL.
func NewHost(cfg HostConfig) *Host {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.OnLeader == nil {
		cfg.OnLeader = func(string, int, string) {}
	}
	if cfg.RaftLog == nil {
		cfg.RaftLog = os.Stderr
	}
	out := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: cfg.RaftLog})
	h := &Host{cfg: cfg, trans: raftgrpc.NewManager(raft.ServerAddress(cfg.Addr), cfg.DialOptions...),
		peers: newPeerLog(out, time.Now, PeerLogEvery)}
	h.mu.hints = map[int]string{}
	h.mu.observers = map[string]func(){}
	return h
}

// Serve registers the Raft transport on srv (the peer port). check, if
// set, refuses a message whose sender is not the caller (a node's
// certificate speaks for that node only).
func (h *Host) Serve(srv grpc.ServiceRegistrar, check func(ctx context.Context, sender string) error) {
	if check != nil {
		h.trans.SetSenderCheck(func(ctx context.Context, id raft.ServerID) error { return check(ctx, string(id)) })
	}
	h.trans.Register(srv)
}

// Open opens the node's write-ahead log.
func (h *Host) Open() error {
	var err error
	h.wal, err = raftlog.Open(filepath.Join(h.cfg.DataDir, "wal"), raftlog.Options{Observer: h.cfg.WALObserver, Logf: h.cfg.Logf})
	return err
}

func (h *Host) groupConfig(id string) (GroupConfig, error) {
	trans, err := h.trans.Transport(id)
	if err != nil {
		return GroupConfig{}, err
	}
	return GroupConfig{
		ID: id, NodeID: raft.ServerID(h.cfg.NodeID),
		Dir:              filepath.Join(h.cfg.DataDir, "shards", id),
		Transport:        trans,
		WAL:              h.wal,
		LogStore:         h.cfg.LogStore,
		HeartbeatTimeout: h.cfg.HeartbeatTimeout,
		Logger:           &groupLogger{Logger: h.peers.out, group: id, peers: h.peers},
	}, nil
}

// OpenMeta opens the node's meta replica over sm, bootstrapping the group
// with boot if that is not empty (a group with state ignores it).
func (h *Host) OpenMeta(sm StateMachine, boot []Peer) (*Group, error) {
	gc, err := h.groupConfig(MetaGroup)
	if err != nil {
		return nil, err
	}
	g, err := OpenMachine(gc, sm)
	if err != nil {
		return nil, err
	}
	if len(boot) > 0 {
		if err := g.BootstrapWith(boot); err != nil {
			_ = g.Close()
			return nil, fmt.Errorf("shard: bootstrapping %s: %w", MetaGroup, err)
		}
	}
	h.observe(g, -1)
	h.mu.Lock()
	h.mu.meta = g
	h.mu.Unlock()
	return g, nil
}

// OpenShard opens the node's replica of shard s, bootstrapping it with
// boot if that is not empty.
func (h *Host) OpenShard(s int, boot []Peer) (*Shard, error) {
	gc, err := h.groupConfig(ShardGroup(s))
	if err != nil {
		return nil, err
	}
	sh, err := Open(Config{
		GroupConfig: gc, BatchMax: h.cfg.BatchMax, BatchWait: h.cfg.BatchWait, MaxInflight: h.cfg.MaxInflight,
		Clock: h.cfg.Clock, Observer: h.cfg.Observer, FSM: fsm.Config{},
	})
	if err != nil {
		return nil, err
	}
	if len(boot) > 0 {
		if err := sh.BootstrapWith(boot); err != nil {
			_ = sh.Close()
			return nil, fmt.Errorf("shard: bootstrapping %s: %w", gc.ID, err)
		}
	}
	h.observe(sh.Group, s)
	h.mu.Lock()
	if s >= len(h.mu.shards) {
		h.mu.shards = append(h.mu.shards, make([]*Shard, s+1-len(h.mu.shards))...)
	}
	h.mu.shards[s] = sh
	h.mu.Unlock()
	return sh, nil
}

// DropShard closes the node's replica of shard s and deletes its state
// (its entries in the shared log too), so that a later replica here starts
// afresh rather than from a stale log.
func (h *Host) DropShard(s int) {
	h.mu.Lock()
	var sh *Shard
	if s < len(h.mu.shards) {
		sh, h.mu.shards[s] = h.mu.shards[s], nil
	}
	h.mu.Unlock()
	if sh == nil {
		return
	}
	id := sh.ID()
	h.unobserve(id)
	if err := sh.Close(); err != nil {
		h.cfg.Logf("closing %s: %v", id, err)
	}
	if h.wal != nil {
		l := h.wal.Log(id)
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		if last > 0 {
			if err := l.DeleteRange(first, last); err != nil {
				h.cfg.Logf("deleting the log of %s: %v", id, err)
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(h.cfg.DataDir, "shards", id)); err != nil {
		h.cfg.Logf("deleting %s: %v", id, err)
	}
}

// Shard returns the node's replica of shard s, nil if it holds none.
func (h *Host) Shard(s int) *Shard {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if s >= 0 && s < len(h.mu.shards) {
		return h.mu.shards[s]
	}
	return nil
}

// Shards returns the node's shard replicas by shard ID (nil where none).
func (h *Host) Shards() []*Shard {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return append([]*Shard(nil), h.mu.shards...)
}

// Meta returns the node's meta replica, nil if it holds none.
func (h *Host) Meta() *Group {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.mu.meta
}

// Group returns the node's replica of the named group, or nil.
func (h *Host) Group(id string) *Group {
	if id == MetaGroup {
		return h.Meta()
	}
	if sh := h.Named(id); sh != nil {
		return sh.Group
	}
	return nil
}

// Named returns the node's replica of the shard group id, or nil.
func (h *Host) Named(id string) *Shard {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, sh := range h.mu.shards {
		if sh != nil && sh.ID() == id {
			return sh
		}
	}
	return nil
}

// Leader names shard s's leader as the node knows it: its own replica's
// view when it holds one, else the last hint ("" if none).
func (h *Host) Leader(s int) string {
	if sh := h.Shard(s); sh != nil {
		if id := sh.LeaderID(); id != "" {
			return id
		}
		// A replica a move is adding has heard from no leader yet, and one
		// a move removed hears from none any more: the last hint is better
		// than waiting.
	}
	h.mu.RLock()
	id := h.mu.hints[s]
	h.mu.RUnlock()
	if id == h.cfg.NodeID {
		return "" // a hint from when this node held a replica that moved away
	}
	return id
}

// SetPeerNames tells the host the node id of each peer address, so that
// its raft log names nodes (n2) rather than addresses.
func (h *Host) SetPeerNames(names map[string]string) { h.peers.setNames(names) }

// SuppressedRaftLogs is how many raft errors about unreachable peers the
// host has counted instead of logging.
func (h *Host) SuppressedRaftLogs() uint64 { return h.peers.suppressed.Load() }

// Hint records what the node learned of shard s's leader ("" to forget it).
func (h *Host) Hint(s int, leader string) {
	h.mu.Lock()
	h.mu.hints[s] = leader
	h.mu.Unlock()
}

// observe follows a group's leader changes (the hints, and the node's
// OnLeader) and its heartbeats reaching a peer again (the raft log).
func (h *Host) observe(g *Group, s int) {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	g.raft.RegisterObserver(obs)
	h.mu.Lock()
	h.mu.observers[g.ID()] = func() {
		// Raft never closes an observer's channel; the goroutine below
		// would keep the group's whole state machine alive.
		g.raft.DeregisterObserver(obs)
		close(ch)
	}
	h.mu.Unlock()
	go func() {
		for o := range ch {
			if r, ok := o.Data.(raft.ResumedHeartbeatObservation); ok {
				h.peers.reachable(string(r.PeerID))
				continue
			}
			leader := string(o.Data.(raft.LeaderObservation).LeaderID)
			if s >= 0 {
				h.Hint(s, leader)
			}
			h.cfg.OnLeader(g.ID(), s, leader)
		}
	}()
}

func (h *Host) unobserve(id string) {
	h.mu.Lock()
	stop := h.mu.observers[id]
	delete(h.mu.observers, id)
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Close hands off the leadership of the groups the node leads, closes
// them, the shared log after them (raft appends until it shuts down), and
// the transport, ending the streams live peers hold open to this node.
func (h *Host) Close() {
	shards, meta := h.Shards(), h.Meta()
	var wg sync.WaitGroup
	for _, sh := range shards {
		if sh != nil && sh.IsLeader() {
			wg.Go(func() {
				if err := sh.TransferLeadership(); err != nil {
					h.cfg.Logf("leadership transfer of %s: %v", sh.ID(), err)
				}
			})
		}
	}
	wg.Wait()
	for _, sh := range shards {
		if sh != nil {
			h.unobserve(sh.ID())
			_ = sh.Close()
		}
	}
	if meta != nil {
		h.unobserve(meta.ID())
		_ = meta.TransferLeadership()
		_ = meta.Close()
	}
	if h.wal != nil {
		_ = h.wal.Close()
	}
	_ = h.trans.Close()
}
