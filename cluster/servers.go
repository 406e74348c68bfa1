package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/fsm"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/shard"
)

type internalServer struct {
	pb.UnimplementedInternalServer
	n *Node
}

// Forward applies each batch on the shard this node leads, concurrently.
func (s internalServer) Forward(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	replies := make([]*pb.ShardReply, len(req.GetBatches()))
	var wg sync.WaitGroup
	for i, b := range req.GetBatches() {
		wg.Go(func() { replies[i] = s.n.applyForwarded(ctx, b) })
	}
	wg.Wait()
	return &pb.ForwardResponse{Replies: replies}, nil
}

func (n *Node) applyForwarded(ctx context.Context, b *pb.ShardBatch) *pb.ShardReply {
	s := int(b.GetShard())
	n.mu.RLock()
	var sh *shard.Shard
	if s < len(n.mu.shards) {
		sh = n.mu.shards[s]
	}
	n.mu.RUnlock()
	notLeader := &pb.ShardReply{Error: pb.ForwardError_FORWARD_ERROR_NOT_LEADER, LeaderId: n.leaderOf(s)}
	if sh == nil {
		return notLeader
	}
	cmd, err := fsm.DecodeCommand(b.GetCommand())
	if err != nil {
		return &pb.ShardReply{Error: pb.ForwardError_FORWARD_ERROR_REJECTED, Message: err.Error()}
	}
	a, err := sh.Submit(ctx, cmd.Ops, b.GetAtomic())
	switch {
	case errors.Is(err, shard.ErrNotLeader):
		notLeader.LeaderId = n.leaderOf(s)
		return notLeader
	case err != nil:
		return &pb.ShardReply{Error: pb.ForwardError_FORWARD_ERROR_OUTCOME_UNKNOWN, Message: err.Error()}
	}
	return &pb.ShardReply{Results: fsm.AppendResults(nil, a.Results), Index: a.Index, AppliedAtUnixNano: a.Now}
}

type adminServer struct {
	pb.UnimplementedAdminServer
	n *Node
}

// Status reports the cluster as this node sees it: gossip's view of the
// nodes, and for each shard this node replicates, its replica's view.
func (s adminServer) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	n := s.n
	snap := n.policySnapshot()
	resp := &pb.StatusResponse{NodeId: n.cfg.NodeID, PolicyVersion: snap.Version(), Policies: uint64(snap.Len())}
	resp.Blocks = uint64(len(meta.LiveBlocks(n.metaFSM.Policies().Blocks, n.clock())))
	n.mu.RLock()
	rec, shards := n.mu.rec, n.mu.shards
	n.mu.RUnlock()
	members := n.gossip.members()
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
		return resp, nil
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
		if sh := shards[id]; sh != nil {
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
	return resp, nil
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
