package shard

import (
	"cmp"
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

	"github.com/quorate/quorate/shard/raftlog"
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
	// ErrNothingNew: Snapshot found nothing applied since the last snapshot.
	ErrNothingNew = errors.New("shard: nothing new to snapshot")
)

// GroupConfig describes one Raft group on this node.
type GroupConfig struct {
	ID        string         // the group's name, e.g. "shard-3" or "meta"
	NodeID    raft.ServerID  // this node
	Dir       string         // where the group keeps its log, stable store and snapshots
	Transport raft.Transport // this group's transport (one per group, shared connections)
	Logger    hclog.Logger   // nil: warnings and errors to stderr
	// WAL is the node's write-ahead log, shared by its groups; nil opens
	// one for this group alone under Dir (closed with the group).
	WAL *raftlog.WAL
	// LogStore selects where entries go: LogStoreWAL (default) or
	// LogStoreBolt, raft-boltdb's B+tree in the group's raft.db. A group
	// whose entries are in the other store moves them at open.
	LogStore string
	// HeartbeatTimeout is raft's heartbeat and election timeout and leader
	// lease (0: DefaultHeartbeatTimeout).
	HeartbeatTimeout time.Duration
}

// The log stores a group can use.
const (
	LogStoreWAL  = "wal"
	LogStoreBolt = "bolt"
)

// logCacheSize is how many recent entries raft.LogCache keeps per group:
// the ones replication to a briefly lagging follower reads back.
const logCacheSize = 512

// Group is one Raft group's replica on this node.
type Group struct {
	id     string
	self   raft.ServerID // this node
	raft   *raft.Raft
	store  *raftboltdb.BoltStore
	ownWAL *raftlog.WAL // opened for this group alone, closed with it
	trans  raft.Transport
}

// DefaultHeartbeatTimeout is how long a follower goes without hearing from its
// leader (a random time between one and two of these) before it calls an
// election, and the candidate's wait before it tries again after a split
// vote. A leader heartbeats each follower of each group it leads every
// tenth of it (to a fifth). Pre-vote (on by default; raftgrpc supports it)
// keeps a follower that merely missed heartbeats from unseating a live
// leader: the other replicas still hear the leader and refuse. 300ms keeps
// the fail-mode window after a leader's crash under a second; the price is
// heartbeats every 30-60ms, which idle nodes pay (README "Failover" has the
// figures, and --raft-heartbeat-timeout the choice).
const DefaultHeartbeatTimeout = 300 * time.Millisecond

// raftConfig tunes hashicorp/raft for tens of groups per node.
func raftConfig(id raft.ServerID, logger hclog.Logger, heartbeatTimeout time.Duration) *raft.Config {
	if heartbeatTimeout <= 0 {
		heartbeatTimeout = DefaultHeartbeatTimeout
	}
	c := raft.DefaultConfig()
	c.LocalID = id
	c.Logger = logger
	c.HeartbeatTimeout = heartbeatTimeout
	c.ElectionTimeout = heartbeatTimeout
	// The leader steps down if it cannot reach a quorum for this long.
	c.LeaderLeaseTimeout = heartbeatTimeout
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
		closeTransport(cfg.Transport)
		return nil, fmt.Errorf("shard %s: %w", cfg.ID, err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: os.Stderr})
	}
	logger = logger.Named(cfg.ID)
	store, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		closeTransport(cfg.Transport)
		return nil, fmt.Errorf("shard %s: opening stable store: %w", cfg.ID, err)
	}
	g := &Group{id: cfg.ID, self: cfg.NodeID, store: store, trans: cfg.Transport}
	// A group that fails to open releases its transport too, so that
	// opening it again may register the group anew.
	fail := func(err error) (*Group, error) {
		g.closeStores()
		closeTransport(cfg.Transport)
		return nil, err
	}
	logs, err := g.openLogs(cfg, logger)
	if err != nil {
		return fail(err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, logger)
	if err != nil {
		return fail(fmt.Errorf("shard %s: opening snapshot store: %w", cfg.ID, err))
	}
	r, err := raft.NewRaft(raftConfig(cfg.NodeID, logger, cfg.HeartbeatTimeout), f, logs, store, snaps, cfg.Transport)
	if err != nil {
		return fail(fmt.Errorf("shard %s: starting raft: %w", cfg.ID, err))
	}
	g.raft = r
	return g, nil
}

func closeTransport(t raft.Transport) {
	if c, ok := t.(io.Closer); ok {
		_ = c.Close()
	}
}

// openLogs returns the group's log store, behind a cache of recent entries,
// after moving any entries the other store holds into it.
func (g *Group) openLogs(cfg GroupConfig, logger hclog.Logger) (raft.LogStore, error) {
	wal := cfg.WAL
	if wal == nil {
		var err error
		if wal, err = raftlog.Open(filepath.Join(cfg.Dir, "wal"), raftlog.Options{}); err != nil {
			return nil, fmt.Errorf("shard %s: opening log: %w", cfg.ID, err)
		}
		g.ownWAL = wal
	}
	var logs, other raft.LogStore = wal.Log(cfg.ID), g.store
	switch cfg.LogStore {
	case "", LogStoreWAL:
	case LogStoreBolt:
		logs, other = other, logs
	default:
		return nil, fmt.Errorf("shard %s: unknown log store %q (want %s or %s)", cfg.ID, cfg.LogStore, LogStoreWAL, LogStoreBolt)
	}
	moved, err := moveLogs(other, logs)
	if err != nil {
		return nil, fmt.Errorf("shard %s: moving entries to the %s log store: %w", cfg.ID, cmp.Or(cfg.LogStore, LogStoreWAL), err)
	}
	if moved > 0 {
		logger.Info("moved log entries to the configured log store", "entries", moved, "store", cmp.Or(cfg.LogStore, LogStoreWAL))
	}
	return raft.NewLogCache(logCacheSize, logs)
}

// moveLogs moves the entries of from into to (a group written by the other
// log store: an upgrade, or a change of --log-store), then deletes them
// from from. A crash while copying leaves to behind from: the copy starts
// over. A crash before the deletion leaves to at or past from's last entry
// (raft may have appended since): from is stale and is cleared.
func moveLogs(from, to raft.LogStore) (int, error) {
	first, err := from.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := from.LastIndex()
	if err != nil || first == 0 {
		return 0, err
	}
	toFirst, err := to.FirstIndex()
	if err != nil {
		return 0, err
	}
	toLast, err := to.LastIndex()
	if err != nil {
		return 0, err
	}
	if toFirst > 0 && toLast >= last {
		return 0, from.DeleteRange(first, last)
	}
	if toFirst > 0 {
		if err := to.DeleteRange(toFirst, toLast); err != nil {
			return 0, err
		}
	}
	const chunk = 256
	for lo := first; lo <= last; lo += chunk {
		var batch []*raft.Log
		for i := lo; i <= last && i < lo+chunk; i++ {
			l := new(raft.Log)
			if err := from.GetLog(i, l); err != nil {
				return 0, err
			}
			batch = append(batch, l)
		}
		if err := to.StoreLogs(batch); err != nil {
			return 0, err
		}
	}
	return int(last - first + 1), from.DeleteRange(first, last)
}

func (g *Group) closeStores() error {
	err := g.store.Close()
	if g.ownWAL != nil {
		err = errors.Join(err, g.ownWAL.Close())
	}
	return err
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

// Snapshot has the replica snapshot its state machine now, so that a
// restart restores that rather than replaying the log written since the
// last one. It waits for the snapshot; ErrNothingNew if there is none to
// take.
func (g *Group) Snapshot() error {
	err := g.raft.Snapshot().Error()
	if errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return ErrNothingNew
	}
	return err
}

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
	Voters       []string // the voting members of Replicas
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
			if srv.Suffrage == raft.Voter {
				s.Voters = append(s.Voters, string(srv.ID))
			}
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
	return errors.Join(err, g.closeStores())
}
