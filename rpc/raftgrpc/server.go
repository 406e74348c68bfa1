package raftgrpc

import (
	"context"
	"errors"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// server implements quoratev1.RaftTransportServer for a Manager: it decodes
// each message, hands it to the consumer channel of the group it names and
// encodes raft's answer.
type server struct {
	quoratev1.UnimplementedRaftTransportServer
	m *Manager
}

// dispatch delivers cmd to group's raft and waits for its answer. Errors are
// gRPC statuses: NotFound for a group this node does not host, Unavailable
// for one shutting down, the context's code if the caller gave up, Unknown
// for an error raft answered with.
func (m *Manager) dispatch(ctx context.Context, group string, cmd any, body io.Reader, heartbeat bool) (any, error) {
	t, err := m.lookup(group)
	if err != nil {
		return nil, err
	}
	respCh, err := t.deliver(ctx, cmd, body, heartbeat)
	if err != nil {
		return nil, err
	}
	return t.await(ctx, respCh)
}

// deliver hands cmd to t's raft and returns the channel raft answers on. A
// heartbeat goes to the heartbeat handler if raft installed one (the fast
// path: the handler runs in the caller's goroutine, and usually answers
// before it returns); anything else goes to the consumer channel.
func (t *Transport) deliver(ctx context.Context, cmd any, body io.Reader, heartbeat bool) (chan raft.RPCResponse, error) {
	if err := t.m.vetSender(ctx, cmd); err != nil {
		return nil, err
	}
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: cmd, Reader: body, RespChan: respCh}
	if heartbeat {
		if fn := t.heartbeatHandler(); fn != nil {
			fn(rpc)
			return respCh, nil
		}
	}
	select {
	case t.consumeCh <- rpc:
		return respCh, nil
	case <-t.ctx.Done():
		return nil, groupClosed(t.group)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// await waits for raft's answer on respCh, as a gRPC status on failure.
func (t *Transport) await(ctx context.Context, respCh <-chan raft.RPCResponse) (any, error) {
	select {
	case resp := <-respCh:
		return answer(resp)
	case <-t.ctx.Done():
		return nil, groupClosed(t.group)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// answer turns raft's answer into a response or a gRPC status.
func answer(resp raft.RPCResponse) (any, error) {
	if resp.Error != nil {
		return nil, status.Error(codes.Unknown, resp.Error.Error())
	}
	return resp.Response, nil
}

func groupClosed(group string) error {
	return status.Errorf(codes.Unavailable, "raftgrpc: raft group %q is shutting down", group)
}

// isHeartbeat reports whether r is a heartbeat, by NetworkTransport's rule:
// a term and a leader and nothing else.
func isHeartbeat(r *raft.AppendEntriesRequest) bool {
	leader := r.Addr
	if len(leader) == 0 {
		leader = r.Leader //lint:ignore SA1019 raft still fills the deprecated field; NetworkTransport checks it too.
	}
	return r.Term != 0 && leader != nil &&
		r.PrevLogEntry == 0 && r.PrevLogTerm == 0 &&
		len(r.Entries) == 0 && r.LeaderCommitIndex == 0
}

// response asserts raft's answer to the type the RPC needs.
func response[T any](resp any) (*T, error) {
	r, ok := resp.(*T)
	if !ok || r == nil {
		return nil, status.Errorf(codes.Internal, "raftgrpc: raft answered with %T", resp)
	}
	return r, nil
}

func (s *server) appendEntries(ctx context.Context, m *quoratev1.AppendEntriesRequest, allowFast bool) (*quoratev1.AppendEntriesResponse, error) {
	req, err := decodeAppendEntriesRequest(m)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.m.dispatch(ctx, m.GetGroup(), req, nil, allowFast && isHeartbeat(req))
	if err != nil {
		return nil, err
	}
	r, err := response[raft.AppendEntriesResponse](resp)
	if err != nil {
		return nil, err
	}
	return encodeAppendEntriesResponse(r), nil
}

// AppendEntries handles one AppendEntries request or heartbeat.
func (s *server) AppendEntries(ctx context.Context, m *quoratev1.AppendEntriesRequest) (*quoratev1.AppendEntriesResponse, error) {
	return s.appendEntries(ctx, m, true)
}

// AppendEntriesPipeline answers a stream of AppendEntries requests in order.
// The sender does not wait for each answer, so the next requests queue in the
// stream while raft handles one. An error ends the stream; the sender then
// falls back to plain AppendEntries.
func (s *server) AppendEntriesPipeline(stream quoratev1.RaftTransport_AppendEntriesPipelineServer) error {
	recv := recvUntilClosed(s.m.ctx, stream.Recv)
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.appendEntries(stream.Context(), m, false)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// RequestVote handles a vote request.
func (s *server) RequestVote(ctx context.Context, m *quoratev1.RequestVoteRequest) (*quoratev1.RequestVoteResponse, error) {
	resp, err := s.m.dispatch(ctx, m.GetGroup(), decodeRequestVoteRequest(m), nil, false)
	if err != nil {
		return nil, err
	}
	r, err := response[raft.RequestVoteResponse](resp)
	if err != nil {
		return nil, err
	}
	return encodeRequestVoteResponse(r), nil
}

// RequestPreVote handles a pre-vote request.
func (s *server) RequestPreVote(ctx context.Context, m *quoratev1.RequestPreVoteRequest) (*quoratev1.RequestPreVoteResponse, error) {
	resp, err := s.m.dispatch(ctx, m.GetGroup(), decodeRequestPreVoteRequest(m), nil, false)
	if err != nil {
		return nil, err
	}
	r, err := response[raft.RequestPreVoteResponse](resp)
	if err != nil {
		return nil, err
	}
	return encodeRequestPreVoteResponse(r), nil
}

// TimeoutNow handles a leadership transfer's request to campaign now.
func (s *server) TimeoutNow(ctx context.Context, m *quoratev1.TimeoutNowRequest) (*quoratev1.TimeoutNowResponse, error) {
	resp, err := s.m.dispatch(ctx, m.GetGroup(), decodeTimeoutNowRequest(m), nil, false)
	if err != nil {
		return nil, err
	}
	r, err := response[raft.TimeoutNowResponse](resp)
	if err != nil {
		return nil, err
	}
	return encodeTimeoutNowResponse(r), nil
}

// InstallSnapshot hands raft the request of the first message and a reader
// over the data of all messages, and answers when raft has installed it.
func (s *server) InstallSnapshot(stream quoratev1.RaftTransport_InstallSnapshotServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetRequest() == nil {
		return status.Error(codes.InvalidArgument, "raftgrpc: InstallSnapshot stream does not start with its request")
	}
	req, err := decodeInstallSnapshotRequest(first.GetRequest())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	body := &chunkReader{stream: stream, buf: first.GetData()}
	resp, err := s.m.dispatch(stream.Context(), first.GetRequest().GetGroup(), req, body, false)
	if err != nil {
		return err
	}
	r, err := response[raft.InstallSnapshotResponse](resp)
	if err != nil {
		return err
	}
	return stream.SendAndClose(encodeInstallSnapshotResponse(r))
}

// chunkReader reads the data of an InstallSnapshot stream's messages as one
// byte stream, ending with io.EOF when the sender closes its side. raft reads
// it from its own goroutine while the handler waits for raft's answer.
type chunkReader struct {
	stream quoratev1.RaftTransport_InstallSnapshotServer
	buf    []byte
	err    error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		m, err := r.stream.Recv()
		switch {
		case err != nil:
			r.err = err // io.EOF at the end of the data
		case m.GetRequest() != nil:
			r.err = errors.New("raftgrpc: InstallSnapshot request repeated mid-stream")
		default:
			r.buf = m.GetData()
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// recvUntilClosed receives from a long-lived stream in its own goroutine, so
// that the handler stops waiting when the manager closes: a peer's stream
// (its pipeline, its heartbeats) stays open as long as the peer lives, and
// would otherwise hold the node's graceful stop until its timeout. The
// goroutine ends when Recv fails, which it does once the handler returns.
func recvUntilClosed[T any](closed context.Context, recv func() (T, error)) func() (T, error) {
	type msg struct {
		v   T
		err error
	}
	ch := make(chan msg)
	go func() {
		for {
			v, err := recv()
			select {
			case ch <- msg{v, err}:
			case <-closed.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return func() (T, error) {
		select {
		case m := <-ch:
			return m.v, m.err
		case <-closed.Done():
			var zero T
			return zero, status.Error(codes.Unavailable, "raftgrpc: node shutting down")
		}
	}
}

// vetSender applies the sender check (SetSenderCheck) to cmd's header.
func (m *Manager) vetSender(ctx context.Context, cmd any) error {
	if m.checkSender == nil {
		return nil
	}
	h, ok := cmd.(raft.WithRPCHeader)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "raftgrpc: a %T carries no sender", cmd)
	}
	if err := m.checkSender(ctx, raft.ServerID(h.GetRPCHeader().ID)); err != nil {
		return status.Errorf(codes.PermissionDenied, "raftgrpc: %v", err)
	}
	return nil
}
