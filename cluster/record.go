package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/quorate/quorate/ring"
)

// nodeInfo is how a node is reached.
type nodeInfo struct {
	ID     string `json:"id"`
	RPC    string `json:"rpc"`
	Peer   string `json:"peer"`
	HTTP   string `json:"http"`
	Gossip string `json:"gossip"`
	// State is the node's place in the cluster ("" is active): see
	// membership.go.
	State string `json:"state,omitempty"`
	// Incarnation is random per data dir of a node that joined: a join
	// repeated by the same data dir (its answer was lost) is the same
	// join, while one from a node that lost its data is refused.
	Incarnation string `json:"incarnation,omitempty"`
}

// record is what a cluster is made of: its nodes, its shard count and which
// nodes replicate which shard, with the replica moves in progress. The meta
// group replicates the authoritative one and only its leader changes it
// (membership.go), each change bumping Epoch; every node keeps a copy on
// disk so it can reopen its groups before gossip finds anyone. A record is
// never modified once shared: a change makes a new one.
type record struct {
	Version   int        `json:"version"`
	Epoch     uint64     `json:"epoch,omitempty"`
	Shards    int        `json:"shards"`
	Replicas  int        `json:"replicas"`
	Nodes     []nodeInfo `json:"nodes"`
	Placement [][]string `json:"placement"` // shard -> replica IDs, preferred leader first
	Moves     []move     `json:"moves,omitempty"`
	// Bounds routes keys once a shard has split (ring.NewSplit); empty
	// means the uniform ranges of ring.New. Children of Splits are not in
	// it yet.
	Bounds []ring.Bound `json:"bounds,omitempty"`
	Splits []split      `json:"splits,omitempty"` // split.go
}

const recordFile = "cluster.json"

// normalize makes empty lists nil, as a record that never had any reads
// back from JSON (they are omitted when empty), so that a restored record
// equals the one it came from.
func (r *record) normalize() {
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

// newRecord places shards over nodes with rendezvous hashing. It depends only
// on its arguments, so every node that sees the same members computes the
// same record: that is what lets them all bootstrap without a coordinator.
func newRecord(nodes []nodeInfo, shards, replicas int) *record {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b nodeInfo) int { return cmpString(a.ID, b.ID) })
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	r := &record{Version: 1, Shards: shards, Replicas: replicas, Nodes: nodes, Placement: make([][]string, shards)}
	for s := range shards {
		r.Placement[s] = ring.Place(s, ids, replicas)
	}
	return r
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *record) node(id string) (nodeInfo, bool) {
	for _, n := range r.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return nodeInfo{}, false
}

// metaVoters are the first members of the meta group: every bootstrap
// node. Later the mover keeps the group's configuration in step with the
// record (mover.go).
func (r *record) metaVoters() []string {
	ids := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		ids[i] = n.ID
	}
	return ids
}

func (r *record) validate() error {
	if r.Version != 1 || r.Shards <= 0 || r.Replicas <= 0 || len(r.Nodes) == 0 || len(r.Placement) != r.Shards {
		return errors.New("cluster: malformed cluster record")
	}
	for _, n := range r.Nodes {
		if n.Peer == "" {
			return fmt.Errorf("cluster: the cluster record has no peer address for node %q: it was made by a quorate without --peer; "+
				"start the cluster with fresh --data directories", n.ID)
		}
	}
	if _, err := r.ring(); err != nil {
		return fmt.Errorf("cluster: cluster record: %w", err)
	}
	for s, reps := range r.Placement {
		for _, id := range reps {
			if _, ok := r.node(id); !ok {
				return fmt.Errorf("cluster: cluster record places shard %d on unknown node %q", s, id)
			}
		}
	}
	return nil
}

func loadRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("cluster: reading %s: %w", recordFile, err)
	}
	return &r, r.validate()
}

// saveRecord writes the record atomically: a temporary file, fsync, rename.
func saveRecord(dir string, r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
}
