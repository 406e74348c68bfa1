package meta

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/quorate/quorate/ring"
)

// NodeInfo is how a node is reached.
type NodeInfo struct {
	ID     string `json:"id"`
	RPC    string `json:"rpc"`
	Peer   string `json:"peer"`
	HTTP   string `json:"http"`
	Gossip string `json:"gossip"`
	// State is the node's place in the cluster (StateActive, ...): see
	// membership.go.
	State string `json:"state,omitempty"`
	// Incarnation is random per data dir of a node that joined: a join
	// repeated by the same data dir (its answer was lost) is the same
	// join, while one from a node that lost its data is refused.
	Incarnation string `json:"incarnation,omitempty"`
}

// Record is what a cluster is made of: its nodes, its shard count and which
// nodes replicate which shard, with the replica moves in progress. The meta
// group replicates the authoritative one and only its leader changes it
// (ApplyRecordOp), each change bumping Epoch; every node keeps a copy on
// disk so it can reopen its groups before gossip finds anyone. A record is
// never modified once shared: a change makes a new one (Clone).
type Record struct {
	Version   int        `json:"version"`
	Epoch     uint64     `json:"epoch,omitempty"`
	Shards    int        `json:"shards"`
	Replicas  int        `json:"replicas"`
	Nodes     []NodeInfo `json:"nodes"`
	Placement [][]string `json:"placement"` // shard -> replica IDs, preferred leader first
	Moves     []Move     `json:"moves,omitempty"`
	// Bounds routes keys once a shard has split (ring.NewSplit); empty
	// means the uniform ranges of ring.New. Children of Splits are not in
	// it yet.
	Bounds []ring.Bound `json:"bounds,omitempty"`
	Splits []Split      `json:"splits,omitempty"` // split.go
}

// Normalize makes empty lists nil, as a record that never had any reads
// back from JSON (they are omitted when empty), so that a restored record
// equals the one it came from.
func (r *Record) Normalize() {
	if len(r.Moves) == 0 {
		r.Moves = nil
	}
	if len(r.Bounds) == 0 {
		r.Bounds = nil
	}
	if len(r.Splits) == 0 {
		r.Splits = nil
	}
}

// NewRecord places shards over nodes with rendezvous hashing. It depends
// only on its arguments, so every node that sees the same members computes
// the same record: that is what lets them all bootstrap without a
// coordinator.
func NewRecord(nodes []NodeInfo, shards, replicas int) *Record {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b NodeInfo) int { return cmp.Compare(a.ID, b.ID) })
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	r := &Record{Version: 1, Shards: shards, Replicas: replicas, Nodes: nodes, Placement: make([][]string, shards)}
	for s := range shards {
		r.Placement[s] = ring.Place(s, ids, replicas)
	}
	return r
}

// Node returns the node with the given ID.
func (r *Record) Node(id string) (NodeInfo, bool) {
	for _, n := range r.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return NodeInfo{}, false
}

// MetaVoters are the first members of the meta group: every bootstrap
// node. Later the meta leader's mover keeps the group's configuration in
// step with the record.
func (r *Record) MetaVoters() []string {
	ids := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		ids[i] = n.ID
	}
	return ids
}

// Validate reports whether the record can be followed: a record read from
// disk or a peer is checked before a node uses it.
func (r *Record) Validate() error {
	if r.Version != 1 || r.Shards <= 0 || r.Replicas <= 0 || len(r.Nodes) == 0 || len(r.Placement) != r.Shards {
		return errors.New("cluster: malformed cluster record")
	}
	for _, n := range r.Nodes {
		if n.Peer == "" {
			return fmt.Errorf("cluster: the cluster record has no peer address for node %q: it was made by a quorate without --peer; "+
				"start the cluster with fresh --data directories", n.ID)
		}
	}
	if _, err := r.Ring(); err != nil {
		return fmt.Errorf("cluster: cluster record: %w", err)
	}
	for s, reps := range r.Placement {
		for _, id := range reps {
			if _, ok := r.Node(id); !ok {
				return fmt.Errorf("cluster: cluster record places shard %d on unknown node %q", s, id)
			}
		}
	}
	return nil
}

// Ring returns the record's routing: the uniform ranges until a shard has
// split, then the recorded bounds.
func (r *Record) Ring() (*ring.Ring, error) {
	if len(r.Bounds) == 0 {
		return ring.New(r.Shards)
	}
	return ring.NewSplit(r.Shards, r.Bounds)
}

// Clone returns a copy of r that shares nothing with it.
func (r *Record) Clone() *Record {
	c := *r
	c.Nodes = slices.Clone(r.Nodes)
	c.Placement = make([][]string, len(r.Placement))
	for s, reps := range r.Placement {
		c.Placement[s] = slices.Clone(reps)
	}
	c.Moves = slices.Clone(r.Moves)
	c.Bounds = slices.Clone(r.Bounds)
	c.Splits = slices.Clone(r.Splits)
	return &c
}

// Digest identifies a record: nodes that compute equal digests would
// bootstrap identical clusters.
func (r *Record) Digest() string {
	b, _ := json.Marshal(r)
	return strconv.FormatUint(xxhash.Sum64(b), 16)
}
