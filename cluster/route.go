package cluster

import (
	"context"
	"time"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Routing to shards this node does not host. With more nodes than replicas
// a node holds no replica of some shards, so Raft never tells it their
// leaders. It learns them from the replicas: a forward to a replica that
// is not the leader answers with the leader it knows (attempt), and while
// a hint is missing the node asks the replicas' Admin Status (learnLeaders)
// so that it can become ready without waiting for traffic.

// hosts reports whether this node holds a replica of shard s.
func (n *Node) hosts(s int) bool {
	return n.host.Shard(s) != nil
}

// replicaFor returns a replica of shard s to ask, turning to the next one
// on each call so that a dead replica is not asked forever.
func (n *Node) replicaFor(s int) string {
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	if rec == nil || s >= len(rec.Placement) || len(rec.Placement[s]) == 0 {
		return ""
	}
	reps := rec.Placement[s]
	return reps[int(n.probe.Add(1))%len(reps)]
}

// learnLeaders asks one replica of each shard that lacks a leader hint for
// its view, through the Admin Status RPC, and keeps the leaders it reports.
func (n *Node) learnLeaders(ctx context.Context) {
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	if rec == nil {
		return
	}
	ask := map[string]bool{}
	for s := range rec.Shards {
		if !n.hosts(s) && n.host.Leader(s) == "" {
			if id := n.replicaFor(s); id != "" && id != n.cfg.NodeID {
				ask[id] = true
			}
		}
	}
	for id := range ask {
		info, ok := rec.Node(id)
		if !ok {
			continue
		}
		f, err := n.peers.Get(info.Peer)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp, err := f.Admin.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err != nil {
			continue
		}
		for _, st := range resp.GetShards() {
			if s := int(st.GetId()); st.GetLeaderId() != "" && !n.hosts(s) && n.host.Leader(s) == "" {
				n.host.Hint(s, st.GetLeaderId())
			}
		}
	}
}
