package raftgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// Transport is the raft.Transport of one Raft group on one node. Manager
// creates it; raft.NewRaft uses it and closes it on Shutdown. Besides
// raft.Transport it implements raft.WithClose and raft.WithPreVote.
//
// Outgoing RPCs use the Manager's shared connection to each peer; incoming
// ones arrive on the Manager's server and are handed to Consumer. The
// heartbeat handler is guarded by hb; the rest is immutable.
type Transport struct {
	m         *Manager
	group     string
	consumeCh chan raft.RPC

	// ctx is canceled by Close (or the Manager's Close): it aborts this
	// group's outgoing RPCs and pipelines, and the incoming RPCs waiting on
	// consumeCh.
	ctx    context.Context
	cancel context.CancelFunc

	hb struct {
		sync.Mutex
		fn func(raft.RPC)
	}
	// hbTerm is the highest term of a heartbeat raft answered through the
	// heartbeat stream: raft answers heartbeats of that term or older
	// without disk I/O, so the stream may handle them in line.
	hbTerm atomic.Uint64
}

var (
	_ raft.Transport   = (*Transport)(nil)
	_ raft.WithClose   = (*Transport)(nil)
	_ raft.WithPreVote = (*Transport)(nil)
)

func newTransport(m *Manager, group string) *Transport {
	ctx, cancel := context.WithCancel(m.ctx)
	return &Transport{
		m:         m,
		group:     group,
		consumeCh: make(chan raft.RPC),
		ctx:       ctx,
		cancel:    cancel,
	}
}

// Group returns the Raft group this transport carries.
func (t *Transport) Group() string { return t.group }

// Consumer returns the channel of incoming RPCs for this group.
func (t *Transport) Consumer() <-chan raft.RPC { return t.consumeCh }

// LocalAddr returns the node's address, shared by all its groups.
func (t *Transport) LocalAddr() raft.ServerAddress { return t.m.localAddr }

// EncodePeer encodes a peer's address as its bytes.
func (t *Transport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer decodes what EncodePeer encoded.
func (t *Transport) DecodePeer(buf []byte) raft.ServerAddress {
	return raft.ServerAddress(buf)
}

// SetHeartbeatHandler installs the fast path for heartbeats: they go to cb
// directly instead of through Consumer, so a follower busy with disk I/O in
// its main loop still answers them in time.
func (t *Transport) SetHeartbeatHandler(cb func(raft.RPC)) {
	t.hb.Lock()
	defer t.hb.Unlock()
	t.hb.fn = cb
}

func (t *Transport) heartbeatHandler() func(raft.RPC) {
	t.hb.Lock()
	defer t.hb.Unlock()
	return t.hb.fn
}

// answeredTerm records that raft answered a heartbeat of term.
func (t *Transport) answeredTerm(term uint64) {
	for {
		cur := t.hbTerm.Load()
		if term <= cur || t.hbTerm.CompareAndSwap(cur, term) {
			return
		}
	}
}

// Close unregisters the group and aborts its RPCs in flight. It does not
// close the Manager's connections, which other groups share. Close is
// idempotent.
func (t *Transport) Close() error {
	t.cancel()
	t.m.remove(t)
	return nil
}

// peer returns the shared connection to target, unless t is closed.
func (t *Transport) peer(target raft.ServerAddress) (*peer, error) {
	if t.ctx.Err() != nil {
		return nil, raft.ErrTransportShutdown
	}
	return t.m.peer(target)
}

// client returns the shared client for target, unless t is closed.
func (t *Transport) client(target raft.ServerAddress) (quoratev1.RaftTransportClient, error) {
	p, err := t.peer(target)
	if err != nil {
		return nil, err
	}
	return p.client, nil
}

// callErr reports err as raft.ErrTransportShutdown if t was closed meanwhile.
func (t *Transport) callErr(err error) error {
	if t.ctx.Err() != nil {
		return raft.ErrTransportShutdown
	}
	return err
}

// AppendEntries sends one AppendEntries request to target. A heartbeat goes
// on the peer's heartbeat stream, shared by all groups, unless the peer does
// not have it (an older version): then, like any other request, it is a
// unary call.
func (t *Transport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	p, err := t.peer(target)
	if err != nil {
		return err
	}
	if hb := t.heartbeatMessage(args); hb != nil {
		err := p.hb.call(t.ctx, hb, resp)
		if !errors.Is(err, errUnaryHeartbeat) {
			if err != nil {
				return t.callErr(err)
			}
			return nil
		}
	}
	if !isHeartbeat(args) {
		p.awaitConn(t.ctx, t.m.connectWait)
	}
	c := p.client
	ctx, cancel := context.WithTimeout(t.ctx, t.m.timeout)
	defer cancel()
	out, err := c.AppendEntries(ctx, encodeAppendEntriesRequest(t.group, args))
	if err != nil {
		return t.callErr(err)
	}
	*resp = decodeAppendEntriesResponse(out)
	return nil
}

// RequestVote asks target for its vote.
func (t *Transport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.m.timeout)
	defer cancel()
	out, err := c.RequestVote(ctx, encodeRequestVoteRequest(t.group, args))
	if err != nil {
		return t.callErr(err)
	}
	*resp = decodeRequestVoteResponse(out)
	return nil
}

// RequestPreVote asks target whether it would vote.
func (t *Transport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.m.timeout)
	defer cancel()
	out, err := c.RequestPreVote(ctx, encodeRequestPreVoteRequest(t.group, args))
	if err != nil {
		return t.callErr(err)
	}
	*resp = decodeRequestPreVoteResponse(out)
	return nil
}

// TimeoutNow tells target to start an election now.
func (t *Transport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.m.timeout)
	defer cancel()
	out, err := c.TimeoutNow(ctx, encodeTimeoutNowRequest(t.group, args))
	if err != nil {
		return t.callErr(err)
	}
	*resp = decodeTimeoutNowResponse(out)
	return nil
}

// InstallSnapshot streams a snapshot to target: the request in the first
// message, then data in chunks. The deadline grows with args.Size.
func (t *Transport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, snapshotTimeout(t.m.timeout, args.Size))
	defer cancel()
	stream, err := c.InstallSnapshot(ctx)
	if err != nil {
		return t.callErr(err)
	}

	msg := &quoratev1.InstallSnapshotChunk{Request: encodeInstallSnapshotRequest(t.group, args)}
	for {
		// A fresh buffer per message: gRPC may still hold the last one.
		buf := make([]byte, t.m.chunkSize)
		n, rerr := io.ReadFull(data, buf)
		if n > 0 || msg.Request != nil {
			msg.Data = buf[:n]
			if err := stream.Send(msg); errors.Is(err, io.EOF) {
				break // the server ended the call early; CloseAndRecv says why
			} else if err != nil {
				return t.callErr(err)
			}
			msg = &quoratev1.InstallSnapshotChunk{}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("raftgrpc: read snapshot for %s: %w", target, rerr) // the deferred cancel aborts the call
		}
	}
	out, err := stream.CloseAndRecv()
	if err != nil {
		return t.callErr(err)
	}
	*resp = decodeInstallSnapshotResponse(out)
	return nil
}

// snapshotTimeout is timeout per snapshotTimeoutScale bytes, and at least
// timeout.
func snapshotTimeout(timeout time.Duration, size int64) time.Duration {
	if scaled := timeout * time.Duration(size/snapshotTimeoutScale); scaled > timeout {
		return scaled
	}
	return timeout
}

// AppendEntriesPipeline opens a pipeline of AppendEntries to target: one
// bidirectional stream on the shared connection.
func (t *Transport) AppendEntriesPipeline(_ raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	c, err := t.client(target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(t.ctx)
	stream, err := c.AppendEntriesPipeline(ctx)
	if err != nil {
		cancel()
		return nil, t.callErr(err)
	}
	p := newPipeline(ctx, cancel, t.group, stream, t.m.timeout)
	if !t.m.goFunc(p.receive) {
		cancel()
		return nil, raft.ErrTransportShutdown
	}
	t.m.pipelines.Add(1)
	return p, nil
}
