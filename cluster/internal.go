package cluster

// The peer port's services: forwarding, the meta leader's end of policy
// and record changes, the record, configuration steps, and Status for
// peers learning leaders. The peer port is an edge like the public one
// (package api): the node's errors become status codes here, and a peer's
// codes become the node's errors again in fromPeer.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/fsm"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
	"github.com/quorate/quorate/shard"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
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
	sh := n.host.Shard(s)
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

// MetaApply is the meta leader's end of proposeMeta.
func (s internalServer) MetaApply(ctx context.Context, req *pb.MetaApplyRequest) (*pb.MetaApplyResponse, error) {
	n := s.n
	mg := n.host.Meta()
	if mg == nil || !mg.IsLeader() {
		resp := &pb.MetaApplyResponse{NotLeader: true}
		if mg != nil {
			resp.LeaderId = mg.LeaderID()
		}
		return resp, nil
	}
	var c meta.Command
	if err := json.Unmarshal(req.GetCommand(), &c); err != nil || c.Op == "" {
		return nil, status.Error(codes.InvalidArgument, "meta apply: not a policy command")
	}
	if c.Op == opIndex {
		// Everything the leader acknowledged it has applied itself first;
		// and the policy version it decides with (older leaders send none).
		b, _ := json.Marshal(metaIndex{Index: mg.AppliedIndex(), Version: n.policies.Load().Version(), Tenants: n.metaFSM.Tenants().Version()})
		return &pb.MetaApplyResponse{Result: b}, nil
	}
	res, err := n.applyMeta(ctx, mg, &c)
	if errors.Is(err, errMetaNotLeader) {
		return &pb.MetaApplyResponse{NotLeader: true}, nil
	}
	if err != nil {
		return nil, toPeer(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return &pb.MetaApplyResponse{Result: b}, nil
}

// Record serves this node's meta replica's record to a peer.
func (s internalServer) Record(context.Context, *pb.RecordRequest) (*pb.RecordResponse, error) {
	rec := s.n.metaFSM.Record()
	if rec == nil {
		return &pb.RecordResponse{}, nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return &pb.RecordResponse{Record: b}, nil
}

// servePeers starts the peer port's server: forwarding, Raft, and Status
// (learnLeaders asks a peer for the leaders it knows), to nodes only.
func (n *Node) servePeers(opts ...grpc.ServerOption) (*grpc.Server, net.Listener, error) {
	lis, err := net.Listen("tcp", n.cfg.PeerAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: --peer: %w", err)
	}
	srv := grpc.NewServer(append(opts, grpc.Creds(credentials.NewTLS(n.sec.tls.ServerConfig(true))))...)
	n.host.Serve(srv, security.CheckPeerNode)
	pb.RegisterInternalServer(srv, internalServer{n: n})
	pb.RegisterAdminServer(srv, peerAdminServer{n: n})
	n.sec.peer = srv
	return srv, lis, nil
}

// peerAdminServer is the Admin service as the peer port serves it: Status
// alone, for learnLeaders. A node certificate is not an operator's token:
// the policy calls answer Unimplemented here, and are served, with scopes
// and the audit log, on the public port only.
type peerAdminServer struct {
	pb.UnimplementedAdminServer
	n *Node
}

func (s peerAdminServer) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return s.n.Status(), nil
}

// toPeer is a node's error as the status a peer receives.
func toPeer(err error) error {
	var me *meta.Error
	if errors.As(err, &me) {
		return status.Error(me.Kind.Code(), me.Msg)
	}
	return status.Error(codes.Internal, err.Error())
}

// fromPeer is a peer's status as the node's error: its kind, or the
// status itself for a code no kind has.
func fromPeer(err error) error {
	st := status.Convert(err)
	if k, ok := meta.KindOf(st.Code()); ok {
		return &meta.Error{Kind: k, Msg: st.Message()}
	}
	return err
}

// Reconfigure is a group leader's end of the mover's steps (mover.go,
// splitter.go): a configuration change of a group this node leads, a
// split step, or a probe of this node's own replica.
func (s internalServer) Reconfigure(ctx context.Context, req *pb.ReconfigureRequest) (*pb.ReconfigureResponse, error) {
	return s.n.reconfigureLocal(ctx, req)
}

// reconfigureLocal is Reconfigure on this node, for its own mover too.
func (n *Node) reconfigureLocal(ctx context.Context, req *pb.ReconfigureRequest) (*pb.ReconfigureResponse, error) {
	s := internalServer{n: n}
	g := n.host.Group(req.GetGroup())
	if req.GetAction() == pb.ReconfigureAction_RECONFIGURE_ACTION_PROBE {
		if g == nil {
			return &pb.ReconfigureResponse{}, nil
		}
		return &pb.ReconfigureResponse{Hosted: true, Index: g.AppliedIndex()}, nil
	}
	if g == nil || !g.IsLeader() {
		resp := &pb.ReconfigureResponse{NotLeader: true}
		if g != nil {
			resp.LeaderId = g.LeaderID()
		}
		return resp, nil
	}
	if isSplitAction(req.GetAction()) {
		return s.splitStep(ctx, g.ID(), req)
	}
	return reconfigure(g, req)
}

// reconfigure applies one configuration change to g, which this node leads.
func reconfigure(g *shard.Group, req *pb.ReconfigureRequest) (*pb.ReconfigureResponse, error) {
	p := shard.Peer{ID: req.GetServerId(), Addr: req.GetServerAddress()}
	if p.ID == "" && req.GetAction() != pb.ReconfigureAction_RECONFIGURE_ACTION_SERVERS {
		return nil, status.Error(codes.InvalidArgument, "reconfigure: server_id is required")
	}
	const timeout = 10 * time.Second
	var idx uint64
	var err error
	switch req.GetAction() {
	case pb.ReconfigureAction_RECONFIGURE_ACTION_ADD_NONVOTER:
		idx, err = g.AddNonvoter(p, timeout)
	case pb.ReconfigureAction_RECONFIGURE_ACTION_ADD_VOTER:
		idx, err = g.AddVoter(p, timeout)
	case pb.ReconfigureAction_RECONFIGURE_ACTION_SERVERS:
		members, at, err := g.Members()
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reconfigure %s: %v", g.ID(), err)
		}
		resp := &pb.ReconfigureResponse{Index: at}
		for _, m := range members {
			resp.Servers = append(resp.Servers, m.ID)
		}
		return resp, nil
	case pb.ReconfigureAction_RECONFIGURE_ACTION_REMOVE:
		idx, err = g.Remove(p.ID, timeout) // a leader asked to remove itself hands over first
	default:
		return nil, status.Errorf(codes.InvalidArgument, "reconfigure: unknown action %v", req.GetAction())
	}
	switch {
	case errors.Is(err, shard.ErrNotLeader):
		return &pb.ReconfigureResponse{NotLeader: true}, nil
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "reconfigure %s: %v", g.ID(), err)
	}
	return &pb.ReconfigureResponse{Index: idx}, nil
}

// splitStep takes a split step on this node's replica of shard group g,
// which leads it.
func (s internalServer) splitStep(ctx context.Context, g string, req *pb.ReconfigureRequest) (*pb.ReconfigureResponse, error) {
	sh := s.n.host.Named(g)
	if sh == nil {
		return nil, status.Errorf(codes.InvalidArgument, "reconfigure: %s is not a shard", g)
	}
	r := req.GetSplit()
	keep, move := fsm.Range{Lo: r.GetKeepLo(), Hi: r.GetKeepHi()}, fsm.Range{Lo: r.GetMoveLo(), Hi: r.GetMoveHi()}
	var c *fsm.Control
	switch req.GetAction() {
	case pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_INFO:
		info := sh.SplitInfo()
		return &pb.ReconfigureResponse{Split: &pb.SplitRanges{
			KeepLo: info.Owned.Lo, KeepHi: info.Owned.Hi, MoveLo: info.Frozen.Lo, MoveHi: info.Frozen.Hi,
			Seq: info.NextSeq, Loading: info.Loading,
		}}, nil
	case pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_EXPORT:
		chunk, last, err := sh.ExportChunk(r.GetSeq())
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "reconfigure %s: %v", g, err)
		}
		return &pb.ReconfigureResponse{Split: &pb.SplitRanges{Seq: r.GetSeq(), Last: last, Chunk: chunk}}, nil
	case pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_FENCE:
		c = &fsm.Control{Kind: fsm.CtlFence, Keep: keep, Move: move}
	case pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_ADOPT:
		c = &fsm.Control{Kind: fsm.CtlAdopt, Keep: keep, Seq: r.GetSeq(), Last: r.GetLast(), Chunk: r.GetChunk()}
	case pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_RELEASE:
		c = &fsm.Control{Kind: fsm.CtlRelease, Move: move}
	}
	ctx, cancel := context.WithTimeout(ctx, reconfigureTry)
	defer cancel()
	idx, err := sh.Control(ctx, c)
	switch {
	case errors.Is(err, shard.ErrNotLeader):
		return &pb.ReconfigureResponse{NotLeader: true}, nil
	case err != nil:
		return nil, status.Errorf(codes.FailedPrecondition, "reconfigure %s: %v", g, err)
	}
	return &pb.ReconfigureResponse{Index: idx}, nil
}

func isSplitAction(a pb.ReconfigureAction) bool {
	switch a {
	case pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_FENCE, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_INFO,
		pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_EXPORT, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_ADOPT,
		pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_RELEASE:
		return true
	}
	return false
}
