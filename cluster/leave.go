package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/memberlist"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// Leaving on purpose: the node asks the meta leader to mark it leaving
// (meta.OpLeave), the mover moves its replicas to the others one safe step at a
// time (handing over each group it leads first), then records it left, and
// the node stops (`quorate leave`, or SIGTERM with --leave-on-terminate).

// Leave is Admin.Leave: the answering node leaves.
func (s adminServer) Leave(ctx context.Context, _ *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	n := s.n
	n.sec.audit.Info("audit: leave", "who", security.PrincipalName(ctx), "node", n.cfg.NodeID)
	epoch, err := n.leave(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.LeaveResponse{Epoch: epoch}, nil
}

// leave marks this node leaving and waits until the record says it left.
func (n *Node) leave(ctx context.Context) (uint64, error) {
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	if rec == nil {
		return 0, status.Error(codes.FailedPrecondition, "leave: this node has not joined a cluster")
	}
	if _, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpLeave, ID: n.cfg.NodeID}); err != nil {
		if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
			return 0, err
		}
		return 0, status.Error(codes.FailedPrecondition, err.Error())
	}
	n.log.Info("leaving the cluster: the meta leader moves this node's replicas away")
	if mg := n.metaReplica(); mg != nil && mg.IsLeader() {
		_ = mg.TransferLeadership() // the mover must run on a node that stays
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if r := n.metaFSM.Record(); r != nil {
			if st, _ := r.State(n.cfg.NodeID); st == meta.StateLeft {
				return r.Epoch, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, status.Error(codes.DeadlineExceeded, "leave: the replicas are still moving (quorate status shows them); the node stays until they are done")
		case <-t.C:
		}
	}
}

// leaveOnTerminate leaves before a graceful stop, with --leave-on-terminate,
// while the node still runs everything: its mover, its reconciliation.
func (n *Node) leaveOnTerminate() {
	if !n.cfg.LeaveOnTerminate || n.fenced.Load() != nil {
		return
	}
	n.mu.RLock()
	joined := n.mu.rec != nil
	n.mu.RUnlock()
	if !joined {
		return
	}
	select {
	case <-n.left:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaveTimeout)
	defer cancel()
	n.log.Info("--leave-on-terminate: leaving the cluster before stopping")
	if _, err := n.leave(ctx); err != nil {
		n.log.Error("leaving before stopping", "err", err)
	}
}

// RemoveNode is Admin.RemoveNode: an operator replaces a node that is down
// for good, whatever the node count (the dead-node grace does so by itself
// only while the others can hold every shard's replicas).
func (s adminServer) RemoveNode(ctx context.Context, req *pb.RemoveNodeRequest) (*pb.RemoveNodeResponse, error) {
	n := s.n
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id: required")
	}
	if m := n.gossip.members()[id]; m != nil && m.State == memberlist.StateAlive {
		return nil, status.Errorf(codes.FailedPrecondition, "remove: node %q is alive; stop it first (to take a live node out, use quorate leave)", id)
	}
	n.sec.audit.Info("audit: remove node", "who", security.PrincipalName(ctx), "node", id)
	rec, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpReplace, ID: id})
	if err != nil {
		if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
			return nil, err
		}
		return nil, status.Error(codes.FailedPrecondition, "remove: "+err.Error())
	}
	n.log.Warn("node removed by an operator: its replicas are rebuilt on the others", "node", id, "epoch", rec.Epoch)
	return &pb.RemoveNodeResponse{Epoch: rec.Epoch}, nil
}
