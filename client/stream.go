package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// DefaultMaxInFlight is how many checks a Stream has in flight at most
// unless WithMaxInFlight says otherwise: the server's default bound per
// stream (quorate agent --stream-max-inflight).
const DefaultMaxInFlight = 1024

// Errors of a Stream.
var (
	// ErrStreamBroken: the stream failed (the node went away, the
	// connection broke, the stream's context ended). Every check waiting
	// on it fails with an error wrapping ErrStreamBroken and the cause,
	// whose gRPC code status.Code reports (UNAVAILABLE, CANCELED, ...).
	// Open a new stream to go on.
	ErrStreamBroken = errors.New("client: check stream broken")
	// ErrStreamClosed: Check after Close, or the server ended the stream.
	ErrStreamClosed = errors.New("client: check stream closed")
)

// StreamOption tunes CheckStream.
type StreamOption func(*streamOptions)

type streamOptions struct {
	maxInFlight int
}

// WithMaxInFlight bounds the checks in flight on the stream (sent or
// about to be, and not yet answered); Check waits for room beyond it.
// n < 1 means DefaultMaxInFlight. Above the node's --stream-max-inflight,
// the node stops reading the stream while its own bound is reached, and
// checks wait in HTTP/2 flow control instead.
func WithMaxInFlight(n int) StreamOption {
	return func(o *streamOptions) { o.maxInFlight = n }
}

// Stream is one RateLimiter.CheckStream: many checks in flight on one
// HTTP/2 stream, for callers that make many checks at once (gateways). It
// is safe for concurrent use; each Check gets its own answer whatever the
// order the node decides them in. Open it with Client.CheckStream; a
// broken stream stays broken (Err says why): open another.
type Stream struct {
	cs     quoratev1.RateLimiter_CheckStreamClient
	cancel context.CancelFunc
	// slots bounds the waiters: a check takes one before it is sent and
	// gives it back when its answer arrives or the stream ends, so the
	// map of waiters never holds more than maxInFlight entries (callers
	// that gave up included: the node still has their checks).
	slots chan struct{}
	// sendLock serialises Send (a gRPC stream allows one sender at a
	// time); a channel, so that a caller waiting for it can give up.
	sendLock chan struct{}
	done     chan struct{} // closed when the stream has ended; err is set

	mu struct {
		sync.Mutex
		next       uint64
		waiting    map[uint64]*waiter
		closing    bool  // Close was called: no new checks
		sendClosed bool  // CloseSend was called
		err        error // why the stream ended
	}
}

type waiter struct {
	ch        chan streamAnswer // buffered: the receiver never blocks
	abandoned bool              // the caller gave up; guarded by Stream.mu
}

type streamAnswer struct {
	resp *quoratev1.CheckResponse
	err  error
}

// CheckStream opens a RateLimiter.CheckStream to the node. The stream
// lasts until Close, until ctx ends, or until it breaks. It does not wait
// for the node: if the node cannot be reached, the first Check fails with
// an error wrapping ErrStreamBroken.
func (c *Client) CheckStream(ctx context.Context, opts ...StreamOption) (*Stream, error) {
	o := streamOptions{maxInFlight: DefaultMaxInFlight}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxInFlight < 1 {
		o.maxInFlight = DefaultMaxInFlight
	}
	ctx, cancel := context.WithCancel(ctx)
	cs, err := c.rl.CheckStream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Stream{
		cs:       cs,
		cancel:   cancel,
		slots:    make(chan struct{}, o.maxInFlight),
		sendLock: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	s.mu.waiting = make(map[uint64]*waiter, o.maxInFlight)
	go s.receive()
	return s, nil
}

// Check asks the node to decide req, as Client.Check does, and returns its
// answer: a node's refusal of the request (INVALID_ARGUMENT, ...) is a gRPC
// status error, as from Check, and the stream goes on. If ctx ends first,
// Check returns ctx.Err() at once and the answer, when it comes, is
// dropped; the check may still have been decided and charged. ctx's
// deadline goes to the node as the check's timeout. Check reads req until
// it returns, and not after.
func (s *Stream) Check(ctx context.Context, req *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	select {
	case <-s.done:
		return nil, s.Err()
	default:
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, s.Err()
	}
	w := &waiter{ch: make(chan streamAnswer, 1)}
	s.mu.Lock()
	if s.mu.err != nil || s.mu.closing {
		err := s.mu.err
		s.mu.Unlock()
		<-s.slots
		if err == nil {
			err = ErrStreamClosed
		}
		return nil, err
	}
	s.mu.next++
	id := s.mu.next
	s.mu.waiting[id] = w
	s.mu.Unlock()

	msg := &quoratev1.CheckStreamRequest{Id: id, Check: req}
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left > 0 {
			msg.Timeout = durationpb.New(left)
		}
	}
	if err := s.send(ctx, id, msg); err != nil {
		return nil, err
	}
	select {
	case a := <-w.ch:
		return a.resp, a.err
	case <-ctx.Done():
		s.mu.Lock()
		if _, ok := s.mu.waiting[id]; ok {
			// The node has the check: keep the slot until its answer
			// comes (and is dropped) or the stream ends.
			w.abandoned = true
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		s.mu.Unlock()
		// Answered meanwhile.
		a := <-w.ch
		return a.resp, a.err
	}
}

// send sends the registered check id; on failure it unregisters it and
// says why.
func (s *Stream) send(ctx context.Context, id uint64, msg *quoratev1.CheckStreamRequest) error {
	select {
	case s.sendLock <- struct{}{}:
	case <-ctx.Done():
		s.forget(id)
		return ctx.Err()
	case <-s.done:
		return s.Err() // the stream ended: its waiters are failed with this error
	}
	s.mu.Lock()
	closed := s.mu.sendClosed
	s.mu.Unlock()
	var err error
	if !closed {
		err = s.cs.Send(msg)
	}
	<-s.sendLock
	switch {
	case closed:
		s.forget(id)
		return ErrStreamClosed
	case errors.Is(err, io.EOF):
		// The stream is gone; the receiver learns why from Recv and fails
		// every waiter, this one included.
		<-s.done
		s.forget(id)
		return s.Err()
	case err != nil:
		// This message could not be sent (it did not marshal: a string
		// that is not UTF-8, ...); the stream goes on.
		s.forget(id)
		return err
	}
	return nil
}

// forget unregisters a check that was never sent, and frees its slot.
func (s *Stream) forget(id uint64) {
	s.mu.Lock()
	_, ok := s.mu.waiting[id]
	delete(s.mu.waiting, id)
	s.mu.Unlock()
	if ok {
		<-s.slots
	}
}

// receive hands each answer to its waiter until the stream ends, then
// fails the waiters left.
func (s *Stream) receive() {
	for {
		m, err := s.cs.Recv()
		if err != nil {
			s.end(err)
			return
		}
		s.mu.Lock()
		w, ok := s.mu.waiting[m.GetId()]
		delete(s.mu.waiting, m.GetId())
		abandoned := ok && w.abandoned
		s.mu.Unlock()
		if !ok {
			continue // not ours (the node echoes ids): nobody to tell
		}
		<-s.slots
		if abandoned {
			continue
		}
		switch r := m.GetResult().(type) {
		case *quoratev1.CheckStreamResponse_Response:
			w.ch <- streamAnswer{resp: r.Response}
		case *quoratev1.CheckStreamResponse_Error:
			w.ch <- streamAnswer{err: status.ErrorProto(r.Error)}
		default:
			w.ch <- streamAnswer{err: status.Error(codes.Internal, "client: the node answered with neither a response nor an error")}
		}
	}
}

// end records why the stream ended and fails every waiter with it.
func (s *Stream) end(cause error) {
	s.mu.Lock()
	switch {
	case errors.Is(cause, io.EOF):
		// The node ended the stream with OK: after Close, or on its own.
		s.mu.err = ErrStreamClosed
	default:
		s.mu.err = fmt.Errorf("%w: %w", ErrStreamBroken, cause)
	}
	err := s.mu.err
	waiting := s.mu.waiting
	s.mu.waiting = map[uint64]*waiter{}
	s.mu.Unlock()
	// Done before the waiters hear: a caller whose check failed and who
	// asks Done next must find the stream ended, not send on it again.
	close(s.done)
	for _, w := range waiting {
		w.ch <- streamAnswer{err: err}
	}
	s.cancel()
}

// Close ends the stream gracefully: no new checks, the checks in flight
// are answered (the node bounds each by its check timeout), then the
// stream ends. Cancelling the context the stream was opened with ends it
// at once instead. Close returns nil once the stream has ended, or why it
// broke if it did.
func (s *Stream) Close() error {
	s.mu.Lock()
	first := !s.mu.closing
	s.mu.closing = true
	s.mu.Unlock()
	if first {
		select {
		case s.sendLock <- struct{}{}:
			s.mu.Lock()
			s.mu.sendClosed = true
			s.mu.Unlock()
			_ = s.cs.CloseSend()
			<-s.sendLock
		case <-s.done:
		}
	}
	<-s.done
	if err := s.Err(); !errors.Is(err, ErrStreamClosed) {
		return err
	}
	return nil
}

// Done is closed when the stream has ended; Err then says why.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Err is nil while the stream is open; then ErrStreamClosed after a clean
// end, or an error wrapping ErrStreamBroken and the cause.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.err
}
