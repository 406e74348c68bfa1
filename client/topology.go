package client

import (
	"net"
	"slices"

	"github.com/quorate/quorate/ring"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// Topology is a Cluster's view of the cluster: what it routes by.
type Topology struct {
	// Shards is the shard count, 0 until a node reported it.
	Shards int
	// Leaders is the id of the node leading each shard, "" where none is
	// known (the shard's checks then go round-robin).
	Leaders []string
	// Nodes maps the id of every node checks may go to (alive or suspect
	// in gossip) to its RPC address.
	Nodes map[string]string
}

// view is a Topology learned from Admin.Status answers, before it is bound
// to connections.
type view struct {
	shards  int
	bounds  []ring.Bound      // after splits: the routed shards' ranges (newest epoch's)
	leaders []string          // by shard
	nodes   map[string]string // id → RPC address, live nodes
}

// statusAnswer is one node's Admin.Status, and the address it was asked at.
type statusAnswer struct {
	via  string
	resp *quoratev1.StatusResponse
}

// mergeStatus builds the view the answers give together.
//
// Nodes: every node some answer reports alive or suspect (a node that
// answered is alive), at its RPC address; a node that advertises an
// unspecified host (0.0.0.0:7401) is reached on the host of the address it
// was asked at, or if it did not answer, the address its reporter was.
//
// Leaders: a node reports, for each shard it replicates, the leader its
// Raft replica follows, with the replica's term; for the other shards, the
// last leader it heard of (term 0). For each shard the leader reported with
// the highest term wins, and among equals one that reports itself; leaders
// not among the nodes are dropped. A shard no answer names a leader for has
// none ("", round-robin) until a later refresh or hint.
func mergeStatus(answers []statusAnswer) view {
	v := view{nodes: map[string]string{}}
	for _, self := range []bool{true, false} { // a node's own answer says best where it is reached
		for _, a := range answers {
			for _, n := range a.resp.GetNodes() {
				st, id := n.GetState(), n.GetId()
				if self != (id == a.resp.GetNodeId()) || id == "" || n.GetRpcAddr() == "" || v.nodes[id] != "" {
					continue
				}
				if self || st == quoratev1.NodeState_NODE_STATE_ALIVE || st == quoratev1.NodeState_NODE_STATE_SUSPECT {
					v.nodes[id] = reachable(n.GetRpcAddr(), a.via)
				}
			}
		}
	}
	var epoch uint64
	for _, a := range answers {
		for _, s := range a.resp.GetShards() {
			v.shards = max(v.shards, int(s.GetId())+1)
		}
		// The ranges of the newest record: a node behind on it would route
		// a split's range to the shard that gave it away.
		if rs := a.resp.GetRanges(); len(rs) > 0 && (v.bounds == nil || a.resp.GetEpoch() > epoch) {
			epoch, v.bounds = a.resp.GetEpoch(), make([]ring.Bound, len(rs))
			for i, r := range rs {
				v.bounds[i] = ring.Bound{Lo: r.GetLo(), Shard: int(r.GetShard())}
			}
		}
	}
	if v.shards > ring.MaxShards {
		v.shards = 0 // not a quorate cluster; route round-robin
		return v
	}
	type best struct {
		term uint64
		self bool
	}
	v.leaders = make([]string, v.shards)
	bests := make([]best, v.shards)
	for _, a := range answers {
		for _, s := range a.resp.GetShards() {
			id, l := int(s.GetId()), s.GetLeaderId()
			if _, ok := v.nodes[l]; !ok {
				continue
			}
			b := best{term: s.GetTerm(), self: l == a.resp.GetNodeId()}
			cur := bests[id]
			if v.leaders[id] == "" || b.term > cur.term || (b.term == cur.term && b.self && !cur.self) {
				v.leaders[id], bests[id] = l, b
			}
		}
	}
	return v
}

// reachable is addr, with the host of via where addr's host is unspecified.
func reachable(addr, via string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
		return addr
	}
	vh, _, err := net.SplitHostPort(via)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(vh, p)
}

// leaderShard is the shard a strict request should be sent to the leader
// of: the shard of its items, or, when they span shards, the one holding
// most of them (the lowest such shard on a tie), so that the fewest items
// are forwarded. -1 for a request without items.
func leaderShard(r *ring.Ring, items []*quoratev1.Item) int {
	switch len(items) {
	case 0:
		return -1
	case 1:
		return r.ShardFor(ring.BucketKey(items[0].GetName(), items[0].GetKey()))
	}
	counts := make([]int, r.Shards())
	best := -1
	for _, it := range items {
		s := r.ShardFor(ring.BucketKey(it.GetName(), it.GetKey()))
		counts[s]++
		if best < 0 || counts[s] > counts[best] || (counts[s] == counts[best] && s < best) {
			best = s
		}
	}
	return best
}

// sortedIDs returns the keys of m in order.
func sortedIDs(m map[string]string) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
