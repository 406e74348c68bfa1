package raftgrpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// Heartbeats are most of what an idle node sends: raft sends one every
// HeartbeatTimeout/10 per group and follower. As unary calls each would be a
// new HTTP/2 stream (headers, hpack, several goroutine wake-ups and a write
// on each side). Instead every group's heartbeats to one peer travel on one
// long-lived bidirectional stream, the peer's heartbeater: a heartbeat is an
// entry in a message, tagged with an id that its answer carries back.
//
// Sending: the first heartbeat to a peer while none is being sent becomes the
// flusher. It sends everything queued as one HeartbeatBatch, and again while
// more queued meanwhile; then, like every other caller, it waits for its own
// answer. One receiver goroutine per stream matches answers to callers by
// id. Heartbeats that queue while a message is being sent thus share the
// next one. When heartbeats to the peer are dense (on average less than two
// gather windows, hbWindow, apart: many groups), the flusher first waits one
// window so that those due at about the same time join it. When they are
// sparse, as with a few groups at raft's randomized intervals, a window would
// rarely catch another heartbeat and would only add a timer wake-up and
// latency to each, so the flusher sends at once.
//
// Failure: a stream that breaks fails the heartbeats it carries with its
// status, as a failed unary call would fail (raft backs off), and the next
// heartbeat opens a new stream. A peer that answers the stream with
// Unimplemented (an older version) gets its heartbeats as unary
// AppendEntries for hbUnary, then the stream is tried again.

// errUnaryHeartbeat tells Transport.AppendEntries to send a heartbeat as a
// unary AppendEntries: the peer has no heartbeat stream.
var errUnaryHeartbeat = errors.New("raftgrpc: peer has no heartbeat stream")

// heartbeatMessage returns args as a Heartbeat if it is a heartbeat the
// stream can carry exactly: by NetworkTransport's rule (isHeartbeat), from
// this node (its header address is the node's, and the deprecated leader
// address is that or empty). It returns nil for anything else.
func (t *Transport) heartbeatMessage(args *raft.AppendEntriesRequest) *quoratev1.Heartbeat {
	if !isHeartbeat(args) || string(args.Addr) != string(t.m.localAddr) {
		return nil
	}
	leader := args.Leader //lint:ignore SA1019 raft still fills the deprecated field; the wire keeps it.
	if len(leader) != 0 && !bytes.Equal(leader, args.Addr) {
		return nil
	}
	return &quoratev1.Heartbeat{
		Group:           t.group,
		Term:            args.Term,
		ServerId:        args.ID,
		ProtocolVersion: int64(args.ProtocolVersion),
		Leader:          len(leader) != 0,
	}
}

// decodeHeartbeat is the AppendEntriesRequest that hb from addr stands for.
func decodeHeartbeat(addr []byte, hb *quoratev1.Heartbeat) *raft.AppendEntriesRequest {
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersion(hb.GetProtocolVersion()),
			ID:              hb.GetServerId(),
			Addr:            addr,
		},
		Term: hb.GetTerm(),
	}
	if hb.GetLeader() {
		req.Leader = addr //lint:ignore SA1019 raft still reads the deprecated field.
	}
	return req
}

// heartbeatAnswer is the answer to heartbeat id: raft's response, or err as
// a status.
func heartbeatAnswer(id uint64, resp any, err error) *quoratev1.HeartbeatResponse {
	if err == nil {
		var r *raft.AppendEntriesResponse
		if r, err = response[raft.AppendEntriesResponse](resp); err == nil {
			return &quoratev1.HeartbeatResponse{Id: id, Response: encodeAppendEntriesResponse(r)}
		}
	}
	st := status.Convert(err)
	return &quoratev1.HeartbeatResponse{Id: id, Code: uint32(st.Code()), Message: st.Message()}
}

// Heartbeats answers a peer's heartbeat stream. Each heartbeat is handled as
// a unary AppendEntries heartbeat would be: a group the node does not host
// is answered NotFound at once, and raft's heartbeat handler (the fast path,
// which does not wait for the group's main loop, so a group busy with disk
// I/O still answers) is called right here, so the answers to one message
// usually go back together in one message.
//
// Only a heartbeat raft can answer without disk I/O is handled in line: one
// of a term the group has answered before. Raft persists a new term before
// answering, so the first heartbeat of a term, like one for a group without
// a heartbeat handler (which waits for the group's main loop), or one the
// handler does not answer at once, is answered on its own from another
// goroutine: one slow group never holds up the others' heartbeats.
func (s *server) Heartbeats(stream quoratev1.RaftTransport_HeartbeatsServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	var late sync.WaitGroup // answers still to come; the stream must outlive them
	defer late.Wait()
	defer cancel()

	var sendMu sync.Mutex
	send := func(answers []*quoratev1.HeartbeatResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(&quoratev1.HeartbeatBatchResponse{Responses: answers})
	}
	recv := recvUntilClosed(s.m.ctx, stream.Recv)
	for {
		batch, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var now []*quoratev1.HeartbeatResponse
		for _, hb := range batch.GetHeartbeats() {
			if a := s.heartbeat(ctx, batch.GetAddr(), hb, &late, send); a != nil {
				now = append(now, a)
			}
		}
		if len(now) > 0 {
			if err := send(now); err != nil {
				return err
			}
		}
	}
}

// heartbeat delivers one heartbeat and returns its answer, or nil if the
// answer comes later: then a goroutine counted by late sends it.
func (s *server) heartbeat(ctx context.Context, addr []byte, hb *quoratev1.Heartbeat, late *sync.WaitGroup, send func([]*quoratev1.HeartbeatResponse) error) *quoratev1.HeartbeatResponse {
	id := hb.GetId()
	t, err := s.m.lookup(hb.GetGroup())
	if err != nil {
		return heartbeatAnswer(id, nil, err)
	}
	req := decodeHeartbeat(addr, hb)
	fast := isHeartbeat(req)
	var respCh chan raft.RPCResponse // set if delivered in line
	if fast && req.Term <= t.hbTerm.Load() {
		if fn := t.heartbeatHandler(); fn != nil {
			respCh = make(chan raft.RPCResponse, 1)
			fn(raft.RPC{Command: req, RespChan: respCh})
			select {
			case resp := <-respCh:
				r, err := answer(resp)
				return heartbeatAnswer(id, r, err)
			default: // the handler answers later, or never if raft shuts down
			}
		}
	}
	late.Add(1)
	go func() {
		defer late.Done()
		ctx, cancel := context.WithTimeout(ctx, s.m.timeout)
		defer cancel()
		var err error
		if respCh == nil {
			respCh, err = t.deliver(ctx, req, nil, fast)
		}
		var resp any
		if err == nil {
			resp, err = t.await(ctx, respCh)
		}
		if err == nil && fast {
			t.answeredTerm(req.Term)
		}
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return // the stream ended; nobody to answer
		}
		_ = send([]*quoratev1.HeartbeatResponse{heartbeatAnswer(id, resp, err)}) // a failed send ends the stream anyway
	}()
	return nil
}

// heartbeater sends every group's heartbeats to one peer on one stream.
type heartbeater struct {
	m      *Manager
	target raft.ServerAddress
	client quoratev1.RaftTransportClient

	mu struct {
		sync.Mutex
		nextID   uint64
		queue    []*heartbeatCall // not sent yet
		flushing bool             // a caller is sending the queue
		stream   *heartbeatStream // nil until opened, and once broken
		inflight map[uint64]*heartbeatCall
		// unaryUntil: the peer has no heartbeat stream; use unary calls.
		unaryUntil time.Time
		// last is when the latest heartbeat was queued; gap a moving
		// average of the time between heartbeats.
		last time.Time
		gap  time.Duration
	}
}

// heartbeatStream is one Heartbeats stream. err is set, under the
// heartbeater's mu, when it broke. sendWatchdog, used by the flusher only,
// ends the stream if a Send blocks for longer than a call's timeout.
type heartbeatStream struct {
	stream       quoratev1.RaftTransport_HeartbeatsClient
	cancel       context.CancelFunc
	sendWatchdog *time.Timer
	err          error
}

// heartbeatCall is one heartbeat awaiting its answer. resp and err are
// written once, under the heartbeater's mu, before done is closed.
type heartbeatCall struct {
	msg    *quoratev1.Heartbeat
	stream *heartbeatStream // the stream it was sent on
	done   chan struct{}
	resp   raft.AppendEntriesResponse
	err    error
}

func newHeartbeater(m *Manager, target raft.ServerAddress, client quoratev1.RaftTransportClient) *heartbeater {
	h := &heartbeater{m: m, target: target, client: client}
	h.mu.inflight = make(map[uint64]*heartbeatCall)
	h.mu.last = time.Now()
	h.mu.gap = time.Second // sparse until shown otherwise
	return h
}

// call sends hb and waits for its answer, at most the Manager's timeout, or
// until ctx ends. It returns errUnaryHeartbeat if the peer has no heartbeat
// stream.
func (h *heartbeater) call(ctx context.Context, hb *quoratev1.Heartbeat, resp *raft.AppendEntriesResponse) error {
	c := &heartbeatCall{msg: hb, done: make(chan struct{})}
	h.mu.Lock()
	if !h.mu.unaryUntil.IsZero() {
		if time.Now().Before(h.mu.unaryUntil) {
			h.mu.Unlock()
			return errUnaryHeartbeat
		}
		h.mu.unaryUntil = time.Time{}
	}
	h.mu.nextID++
	hb.Id = h.mu.nextID
	h.mu.queue = append(h.mu.queue, c)
	now := time.Now()
	h.mu.gap += (min(now.Sub(h.mu.last), time.Second) - h.mu.gap) / 8 // an average over the last ~8
	h.mu.last = now
	flusher := !h.mu.flushing
	h.mu.flushing = true
	gather := h.mu.gap < 2*h.m.hbWindow
	h.mu.Unlock()
	if flusher {
		h.flush(gather)
	}

	timer := time.NewTimer(h.m.timeout)
	defer timer.Stop()
	select {
	case <-c.done:
		if c.err != nil {
			return c.err
		}
		*resp = c.resp
		return nil
	case <-timer.C:
		h.forget(c)
		return status.Errorf(codes.DeadlineExceeded, "raftgrpc: heartbeat to %s not answered in %v", h.target, h.m.timeout)
	case <-ctx.Done():
		h.forget(c)
		return raft.ErrTransportShutdown
	}
}

// flush sends what is queued until the queue is empty, after waiting the
// gather window if gather is set. One caller at a time flushes.
func (h *heartbeater) flush(gather bool) {
	if gather {
		h.m.hbGathers.Add(1)
		time.Sleep(h.m.hbWindow)
	}
	for {
		h.mu.Lock()
		batch := h.mu.queue
		h.mu.queue = nil
		if len(batch) == 0 {
			h.mu.flushing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		h.send(batch)
	}
}

// send sends batch as one message on the stream, opening one if needed.
// Calls it cannot send fail at once.
func (h *heartbeater) send(batch []*heartbeatCall) {
	s, err := h.open()
	if err != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range batch {
			c.fail(err)
		}
		return
	}
	msg := &quoratev1.HeartbeatBatch{Addr: []byte(h.m.localAddr), Heartbeats: make([]*quoratev1.Heartbeat, len(batch))}
	h.mu.Lock()
	if s.err != nil { // broke meanwhile
		err := h.streamErr(s.err)
		for _, c := range batch {
			c.fail(err)
		}
		h.mu.Unlock()
		return
	}
	for i, c := range batch {
		c.stream = s
		h.mu.inflight[c.msg.Id] = c
		msg.Heartbeats[i] = c.msg
	}
	h.mu.Unlock()
	// A peer that stops reading would block Send on flow control: give it
	// the timeout of a call, then end the stream.
	s.sendWatchdog.Reset(h.m.timeout)
	err = s.stream.Send(msg)
	s.sendWatchdog.Stop()
	if err == nil {
		h.m.hbBatches.Add(1)
	}
	// On an error the stream is over, and its receiver fails the calls it
	// carries with the stream's status, which Recv returns.
}

// open returns the current stream, or opens one. Only the flusher calls it.
func (h *heartbeater) open() (*heartbeatStream, error) {
	h.mu.Lock()
	s := h.mu.stream
	h.mu.Unlock()
	if s != nil {
		return s, nil
	}
	ctx, cancel := context.WithCancel(h.m.ctx)
	// Opening waits while the connection is being made: at most a timeout.
	watchdog := time.AfterFunc(h.m.timeout, cancel)
	stream, err := h.client.Heartbeats(ctx)
	watchdog.Stop()
	if err != nil {
		cancel()
		return nil, err
	}
	s = &heartbeatStream{stream: stream, cancel: cancel, sendWatchdog: time.AfterFunc(time.Hour, cancel)}
	s.sendWatchdog.Stop()
	h.mu.Lock()
	h.mu.stream = s
	h.mu.Unlock()
	if !h.m.goFunc(func() { h.receive(s) }) {
		h.broken(s, raft.ErrTransportShutdown)
		return nil, raft.ErrTransportShutdown
	}
	h.m.hbStreams.Add(1)
	return s, nil
}

// receive hands each answer on s to its caller until s breaks.
func (h *heartbeater) receive(s *heartbeatStream) {
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			h.broken(s, err)
			return
		}
		h.mu.Lock()
		for _, a := range msg.GetResponses() {
			c, ok := h.mu.inflight[a.GetId()]
			if !ok || c.stream != s {
				continue // its caller gave up
			}
			delete(h.mu.inflight, a.GetId())
			h.m.hbAnswered.Add(1)
			if code := codes.Code(a.GetCode()); code != codes.OK {
				c.fail(status.Error(code, a.GetMessage()))
				continue
			}
			c.resp = decodeAppendEntriesResponse(a.GetResponse())
			close(c.done)
		}
		h.mu.Unlock()
	}
}

// broken ends s after err and fails the calls it carries; the next
// heartbeat opens a new stream. Unimplemented means the peer has no
// heartbeat stream: its calls are sent as unary ones, and so are the next
// heartbeats for hbUnary.
func (h *heartbeater) broken(s *heartbeatStream, err error) {
	s.cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	if h.mu.stream == s {
		h.mu.stream = nil
	}
	if status.Code(err) == codes.Unimplemented {
		h.mu.unaryUntil = time.Now().Add(h.m.hbUnary)
	}
	err = h.streamErr(err)
	for id, c := range h.mu.inflight {
		if c.stream == s {
			delete(h.mu.inflight, id)
			c.fail(err)
		}
	}
}

// streamErr is what a heartbeat carried by a stream that broke with err
// fails with.
func (h *heartbeater) streamErr(err error) error {
	switch {
	case status.Code(err) == codes.Unimplemented:
		return errUnaryHeartbeat
	case errors.Is(err, io.EOF): // the peer ended the stream without an error
		return status.Errorf(codes.Unavailable, "raftgrpc: heartbeat stream to %s ended", h.target)
	}
	return err
}

// forget drops c, whose caller gave up, from the queue or the calls in
// flight.
func (h *heartbeater) forget(c *heartbeatCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.inflight[c.msg.Id] == c {
		delete(h.mu.inflight, c.msg.Id)
		return
	}
	if i := slices.Index(h.mu.queue, c); i >= 0 {
		h.mu.queue = slices.Delete(h.mu.queue, i, i+1)
	}
}

// fail completes c with err. The caller holds the heartbeater's mu, or c
// was never shared.
func (c *heartbeatCall) fail(err error) {
	c.err = err
	close(c.done)
}
