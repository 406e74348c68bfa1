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

	"github.com/hashicorp/raft"
	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/fsm"
	pb "github.com/quorate/quorate/rpc/quoratev1"
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

// MetaApply is the meta leader's end of proposeMeta.
func (s internalServer) MetaApply(ctx context.Context, req *pb.MetaApplyRequest) (*pb.MetaApplyResponse, error) {
	n := s.n
	n.mu.RLock()
	mg := n.mu.meta
	n.mu.RUnlock()
	if mg == nil || mg.Raft().State() != raft.Leader {
		resp := &pb.MetaApplyResponse{NotLeader: true}
		if mg != nil {
			_, id := mg.Raft().LeaderWithID()
			resp.LeaderId = string(id)
		}
		return resp, nil
	}
	var c meta.Command
	if err := json.Unmarshal(req.GetCommand(), &c); err != nil || c.Op == "" {
		return nil, status.Error(codes.InvalidArgument, "meta apply: not a policy command")
	}
	if c.Op == opIndex {
		// Everything the leader acknowledged it has applied itself first.
		b, _ := json.Marshal(struct{ Index uint64 }{mg.Raft().AppliedIndex()})
		return &pb.MetaApplyResponse{Result: b}, nil
	}
	res, err := n.applyMeta(ctx, mg.Raft(), &c)
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

// Reconfigure is a group leader's end of the mover's steps (mover.go).
func (s internalServer) Reconfigure(ctx context.Context, req *pb.ReconfigureRequest) (*pb.ReconfigureResponse, error) {
	return s.n.reconfigureLocal(req)
}

// servePeers starts the peer port's server: forwarding, Raft, and Status
// (learnLeaders asks a peer for the leaders it knows), to nodes only.
func (n *Node) servePeers(opts ...grpc.ServerOption) (*grpc.Server, net.Listener, error) {
	lis, err := net.Listen("tcp", n.cfg.PeerAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: --peer: %w", err)
	}
	srv := grpc.NewServer(append(opts, grpc.Creds(credentials.NewTLS(n.sec.tls.ServerConfig(true))))...)
	n.raftMgr.SetSenderCheck(checkRaftSender)
	n.raftMgr.Register(srv)
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

// peerCodes are the status codes of meta.Error's kinds between nodes.
var peerCodes = map[meta.Kind]codes.Code{
	meta.Invalid:  codes.InvalidArgument,
	meta.NotFound: codes.NotFound,
	meta.Conflict: codes.FailedPrecondition,
	meta.NoLeader: codes.Unavailable,
	meta.Unknown:  codes.Unknown,
	meta.Timeout:  codes.DeadlineExceeded,
}

// toPeer is a node's error as the status a peer receives.
func toPeer(err error) error {
	var me *meta.Error
	if errors.As(err, &me) {
		return status.Error(peerCodes[me.Kind], me.Msg)
	}
	return status.Error(codes.Internal, err.Error())
}

// fromPeer is a peer's status as the node's error: its kind, or Unknown
// (a change sent whose outcome the peer could not tell).
func fromPeer(err error) error {
	st := status.Convert(err)
	for k, c := range peerCodes {
		if c == st.Code() {
			return &meta.Error{Kind: k, Msg: st.Message()}
		}
	}
	return &meta.Error{Kind: meta.Unknown, Msg: st.Message()}
}
