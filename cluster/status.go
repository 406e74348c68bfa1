package cluster

import (
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/cluster/meta"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Status reports the cluster as this node sees it: gossip's view of the
// nodes, and for each shard this node replicates, its replica's view.
func (n *Node) Status() *pb.StatusResponse {
	snap := n.policies.Load()
	resp := &pb.StatusResponse{NodeId: n.cfg.NodeID, PolicyVersion: snap.Version(), Policies: uint64(snap.Len())}
	resp.Blocks = uint64(len(meta.LiveBlocks(n.metaFSM.Policies().Blocks, n.clock())))
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	members := n.gossip.Members()
	seen := map[string]bool{}
	if rec != nil {
		for _, info := range rec.Nodes {
			resp.Nodes = append(resp.Nodes, &pb.NodeStatus{Id: info.ID, RpcAddr: info.RPC, HttpAddr: info.HTTP, State: nodeState(members[info.ID]),
				Membership: meta.StateName(info.State)})
			seen[info.ID] = true
		}
	}
	for id, m := range members {
		if !seen[id] {
			resp.Nodes = append(resp.Nodes, &pb.NodeStatus{Id: id, State: nodeState(m)})
		}
	}
	if rec == nil {
		return resp
	}
	resp.UnderReplicated = underReplicated(rec, members)
	resp.Epoch, resp.Replicas = rec.Epoch, uint32(rec.Replicas)
	for _, m := range rec.Moves {
		resp.Moves = append(resp.Moves, &pb.MoveStatus{Shard: uint32(m.Shard), Add: m.Add, Remove: m.Remove})
	}
	resp.ShardCount = uint32(rec.Shards)
	if rg, err := rec.Ring(); err == nil && len(rec.Bounds) > 0 {
		for _, b := range rg.Bounds() {
			lo, hi, _ := rg.Routed(b.Shard)
			resp.Ranges = append(resp.Ranges, &pb.ShardRange{Shard: uint32(b.Shard), Lo: lo, Hi: hi})
		}
	}
	for _, sp := range rec.Splits {
		resp.Splits = append(resp.Splits, &pb.SplitStatus{Parent: uint32(sp.Parent), Child: uint32(sp.Child), At: sp.At})
	}
	for id, reps := range rec.Placement {
		st := &pb.ShardStatus{Id: uint32(id), Replicas: reps, LeaderId: n.leaderOf(id)}
		if sh := n.host.Shard(id); sh != nil {
			gs := sh.Status()
			st.Term, st.AppliedIndex = gs.Term, gs.AppliedIndex
			st.Voters = gs.Voters
			if gs.State == "Leader" {
				st.LastContact = timestamppb.Now()
			} else if d, err := time.ParseDuration(gs.LastContact); err == nil {
				st.LastContact = timestamppb.New(time.Now().Add(-d))
			}
		}
		resp.Shards = append(resp.Shards, st)
	}
	return resp
}

func nodeState(m *memberlist.Node) pb.NodeState {
	if m == nil {
		return pb.NodeState_NODE_STATE_DEAD
	}
	switch m.State {
	case memberlist.StateAlive:
		return pb.NodeState_NODE_STATE_ALIVE
	case memberlist.StateSuspect:
		return pb.NodeState_NODE_STATE_SUSPECT
	case memberlist.StateLeft:
		return pb.NodeState_NODE_STATE_LEFT
	}
	return pb.NodeState_NODE_STATE_DEAD
}
