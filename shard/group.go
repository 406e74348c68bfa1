package shard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Errors returned by this package.
var (
	// ErrNotLeader: this replica does not lead its group; retry at the leader.
	ErrNotLeader = errors.New("shard: not the leader")
	// ErrClosed: the group has been closed.
	ErrClosed = errors.New("shard: closed")
	// ErrOutcomeUnknown: the command was proposed but leadership was lost
	// before it was known to commit; it may or may not have been applied.
	ErrOutcomeUnknown = errors.New("shard: outcome unknown")
)

// GroupConfig describes one Raft group on this node.
type GroupConfig struct {
	ID        string         // the group's name, e.g. "shard-3" or "meta"
	NodeID    raft.ServerID  // this node
	Dir       string         // where the group keeps its log, stable store and snapshots
	Transport raft.Transport // this group's transport (one per group, shared connections)
	Logger    hclog.Logger   // nil: warnings and errors to stderr
}

// Group is one Raft group's replica on this node.
type Group struct {
	id    string
	raft  *raft.Raft
	store *raftboltdb.BoltStore
	trans raft.Transport
}

// raftConfig tunes hashicorp/raft for tens of groups per node.
func raftConfig(id raft.ServerID, logger hclog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.Logger = logger
	// A leader sends heartbeats every HeartbeatTimeout/10 to each follower of
	// each group it leads: 1s keeps 16 groups × 2 followers at ~320 small
	// RPCs/s per node, and elections start within 1-2s of a leader's death.
	// Shorter timeouts cause spurious elections on a loaded 2-core machine.
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	// The leader steps down if it cannot reach a quorum for this long; half
	// the heartbeat timeout keeps a partitioned leader from serving long.
	c.LeaderLeaseTimeout = 500 * time.Millisecond
	// Each replication stream sends an AppendEntries at least every
	// CommitTimeout even when idle, which is how followers learn the commit
	// index. New entries are sent at once regardless, and only the leader
	// answers checks, so followers may apply a little late: 250ms keeps the
	// idle cost of 16 groups × 2 followers near heartbeat level (at 20ms it
	// was about a quarter core per idle node).
	c.CommitTimeout = 250 * time.Millisecond
	// Each entry is already a batch of checks; 256 entries per AppendEntries
	// lets a busy leader ship thousands of checks per round trip.
	c.MaxAppendEntries = 256
	// Let raft gather queued Apply calls into one disk write and one
	// AppendEntries: the second level of group commit.
	c.BatchApplyCh = true
	// Entries are small: snapshot every 8192 entries (or 60s), and keep 4096
	// behind the snapshot so a briefly lagging follower catches up from the
	// log instead of a snapshot install.
	c.SnapshotThreshold = 8192
	c.SnapshotInterval = 60 * time.Second
	c.TrailingLogs = 4096
	return c
}

// OpenGroup opens (or creates) the group's stores and starts its Raft
// replica. A group with no state waits for Bootstrap or to be contacted by a
// leader.
func OpenGroup(cfg GroupConfig, f raft.FSM) (*Group, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("shard %s: %w", cfg.ID, err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: os.Stderr})
	}
	logger = logger.Named(cfg.ID)
	store, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("shard %s: opening log store: %w", cfg.ID, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, logger)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("shard %s: opening snapshot store: %w", cfg.ID, err)
	}
	r, err := raft.NewRaft(raftConfig(cfg.NodeID, logger), f, store, store, snaps, cfg.Transport)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("shard %s: starting raft: %w", cfg.ID, err)
	}
	return &Group{id: cfg.ID, raft: r, store: store, trans: cfg.Transport}, nil
}

// Bootstrap makes servers the group's first configuration. Every initial
// member may call it with the same servers; a group that already has state
// ignores it, so bootstrapping happens exactly once.
func (g *Group) Bootstrap(servers []raft.Server) error {
	err := g.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	return err
}

// ID is the group's name.
func (g *Group) ID() string { return g.id }

// Raft exposes the replica for callers that need more than this API.
func (g *Group) Raft() *raft.Raft { return g.raft }

// IsLeader reports whether this replica leads the group.
func (g *Group) IsLeader() bool { return g.raft.State() == raft.Leader }

// Leader returns the leader's address and ID, empty when none is known.
func (g *Group) Leader() (raft.ServerAddress, raft.ServerID) { return g.raft.LeaderWithID() }

// Status is a snapshot of the replica's view of its group.
type Status struct {
	ID           string
	State        string
	Leader       raft.ServerID
	Term         uint64
	AppliedIndex uint64
	LastContact  string
	Replicas     []raft.ServerID
}

// Status reports the replica's view of its group.
func (g *Group) Status() Status {
	st := g.raft.Stats()
	_, leader := g.raft.LeaderWithID()
	s := Status{ID: g.id, State: g.raft.State().String(), Leader: leader, LastContact: st["last_contact"]}
	s.Term, _ = strconv.ParseUint(st["term"], 10, 64)
	s.AppliedIndex = g.raft.AppliedIndex()
	if f := g.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			s.Replicas = append(s.Replicas, srv.ID)
		}
	}
	return s
}

// TransferLeadership hands leadership to another replica, if this one leads.
func (g *Group) TransferLeadership() error {
	if !g.IsLeader() {
		return nil
	}
	return g.raft.LeadershipTransfer().Error()
}

// Close stops the replica and closes its stores and transport.
func (g *Group) Close() error {
	err := g.raft.Shutdown().Error()
	if c, ok := g.trans.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	return errors.Join(err, g.store.Close())
}
