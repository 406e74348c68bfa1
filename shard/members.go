package shard

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// A group's configuration and proposals in this package's terms, so that
// the node hosting it (package cluster) needs no raft types.

// Peer is a group member: a node's ID and the address of its peer port.
type Peer struct {
	ID, Addr string
}

func raftServers(peers []Peer) []raft.Server {
	out := make([]raft.Server, len(peers))
	for i, p := range peers {
		out[i] = raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)}
	}
	return out
}

// Member is a replica in a group's configuration.
type Member struct {
	Peer
	Voter bool
}

// LeaderID names the group's leader, "" when none is known.
func (g *Group) LeaderID() string {
	_, id := g.raft.LeaderWithID()
	return string(id)
}

// AppliedIndex is the last log index this replica's state machine applied.
func (g *Group) AppliedIndex() uint64 { return g.raft.AppliedIndex() }

// Apply proposes data as one command, on this replica, which must lead
// the group, and returns the state machine's answer. ErrNotLeader means it
// was not proposed (retry at the leader); ErrOutcomeUnknown that it was
// and may or may not have applied.
func (g *Group) Apply(data []byte, timeout time.Duration) (any, error) {
	f := g.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrLeadershipLost) && f.Index() == 0 {
			return nil, ErrNotLeader
		}
		return nil, translate(err)
	}
	return f.Response(), nil
}

// Barrier returns once everything committed before it has been applied on
// this replica, its leader.
func (g *Group) Barrier(timeout time.Duration) error {
	return translate(g.raft.Barrier(timeout).Error())
}

// Members returns the group's configuration and the log index it was
// made at.
func (g *Group) Members() ([]Member, uint64, error) {
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, translate(err)
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{Peer: Peer{ID: string(s.ID), Addr: string(s.Address)}, Voter: s.Suffrage == raft.Voter})
	}
	return out, f.Index(), nil
}

// AddNonvoter adds p to the group as a replica that does not vote (it
// catches up first); AddVoter adds it, or promotes it, as a voter. Both
// return the configuration change's log index.
func (g *Group) AddNonvoter(p Peer, timeout time.Duration) (uint64, error) {
	return indexOf(g.raft.AddNonvoter(raft.ServerID(p.ID), raft.ServerAddress(p.Addr), 0, timeout))
}

// AddVoter: see AddNonvoter.
func (g *Group) AddVoter(p Peer, timeout time.Duration) (uint64, error) {
	return indexOf(g.raft.AddVoter(raft.ServerID(p.ID), raft.ServerAddress(p.Addr), 0, timeout))
}

// Remove takes node id out of the group. A leader asked to remove itself
// hands leadership over first and answers ErrNotLeader: the new leader
// removes it, and the group is never leaderless for an election timeout.
func (g *Group) Remove(id string, timeout time.Duration) (uint64, error) {
	if raft.ServerID(id) == g.self {
		if err := g.TransferLeadership(); err != nil {
			return 0, err
		}
		return 0, ErrNotLeader
	}
	return indexOf(g.raft.RemoveServer(raft.ServerID(id), 0, timeout))
}

func indexOf(f raft.IndexFuture) (uint64, error) {
	if err := f.Error(); err != nil {
		return 0, translate(err)
	}
	return f.Index(), nil
}

// TransferTo hands leadership to replica p.
func (g *Group) TransferTo(p Peer) error {
	return g.raft.LeadershipTransferToServer(raft.ServerID(p.ID), raft.ServerAddress(p.Addr)).Error()
}

// BootstrapWith is Bootstrap with the peers as this package names them.
func (g *Group) BootstrapWith(peers []Peer) error { return g.Bootstrap(raftServers(peers)) }
