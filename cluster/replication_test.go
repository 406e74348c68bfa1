package cluster

import (
	"slices"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/quorate/quorate/cluster/meta"
)

// TestUnderReplicated: a shard is under-replicated when fewer of its
// replicas than the replication factor are on member nodes alive or
// suspect.
func TestUnderReplicated(t *testing.T) {
	rec := &meta.Record{Replicas: 2, Placement: [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}},
		Nodes: []meta.NodeInfo{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	members := map[string]*memberlist.Node{
		"a": {State: memberlist.StateAlive},
		"b": {State: memberlist.StateSuspect},
		"c": {State: memberlist.StateDead},
	}
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{1, 2}) {
		t.Errorf("underReplicated = %v; want [1 2] (c is dead, b only suspect)", got)
	}
	// A replaced node that came back is alive but holds nothing.
	members["c"] = &memberlist.Node{State: memberlist.StateAlive}
	rec.Nodes[2].State = meta.StateRemoved
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{1, 2}) {
		t.Errorf("with c removed but alive: %v; want [1 2]", got)
	}
	delete(members, "a")
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{0, 1, 2}) {
		t.Errorf("with a unknown to gossip: %v; want every shard", got)
	}
}
