package raftgrpc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// pipeline is a raft.AppendPipeline over one bidirectional stream. The caller
// sends requests without waiting; one receiver goroutine reads the responses
// and matches them to requests in order (the server answers in order), and
// hands the completed futures to Consumer.
//
// A request's future is queued before the request is sent, so the receiver,
// which waits in Recv rather than on the queue, always finds the future of a
// response: one wake-up per response. sendMu serializes queueing and Send,
// so the queue order is the send order.
type pipeline struct {
	group   string
	stream  quoratev1.RaftTransport_AppendEntriesPipelineClient
	timeout time.Duration

	// ctx ends the stream; cancel is called by Close, by a response timeout
	// and by the transport's Close (through the parent context).
	ctx    context.Context
	cancel context.CancelFunc

	sendMu   sync.Mutex
	inflight chan *appendFuture     // queued to be sent or sent, awaiting a response, in send order
	done     chan raft.AppendFuture // completed, for Consumer
	finished chan struct{}          // closed when receive returns

	// waiting counts requests sent and not answered; the watchdog ends the
	// pipeline when the oldest of them has waited longer than timeout since
	// it was sent or since the previous response, whichever is later.
	watch struct {
		sync.Mutex
		waiting  int
		watchdog *time.Timer
	}
}

func newPipeline(ctx context.Context, cancel context.CancelFunc, group string, stream quoratev1.RaftTransport_AppendEntriesPipelineClient, timeout time.Duration) *pipeline {
	p := &pipeline{
		group:    group,
		stream:   stream,
		timeout:  timeout,
		ctx:      ctx,
		cancel:   cancel,
		inflight: make(chan *appendFuture, pipelineMaxInFlight),
		done:     make(chan raft.AppendFuture, pipelineMaxInFlight),
		finished: make(chan struct{}),
	}
	p.watch.watchdog = time.AfterFunc(time.Hour, cancel)
	p.watch.watchdog.Stop()
	return p
}

// AppendEntries sends args down the pipeline. It blocks while
// pipelineMaxInFlight requests await their responses (back-pressure).
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &appendFuture{start: time.Now(), req: args, resp: resp, ch: make(chan struct{})}

	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.ctx.Err() != nil {
		return nil, raft.ErrPipelineShutdown
	}
	select {
	case p.inflight <- f:
	case <-p.ctx.Done():
		return nil, raft.ErrPipelineShutdown
	}
	p.sent()
	if err := p.stream.Send(encodeAppendEntriesRequest(p.group, args)); err != nil {
		// f is queued but the caller gets the error instead: end the
		// pipeline, and let the receiver drop f.
		f.unsent.Store(true)
		shutdown := p.ctx.Err() != nil
		p.cancel()
		if shutdown {
			return nil, raft.ErrPipelineShutdown
		}
		return nil, err
	}
	return f, nil
}

// sent arms the watchdog for a request just sent, if it is the only one
// waiting.
func (p *pipeline) sent() {
	p.watch.Lock()
	defer p.watch.Unlock()
	p.watch.waiting++
	if p.watch.waiting == 1 {
		p.watch.watchdog.Reset(p.timeout)
	}
}

// answered rearms the watchdog for the next waiting request after a
// response, or stops it if none waits.
func (p *pipeline) answered() {
	p.watch.Lock()
	defer p.watch.Unlock()
	p.watch.waiting--
	if p.watch.waiting > 0 {
		p.watch.watchdog.Reset(p.timeout)
	} else {
		p.watch.watchdog.Stop()
	}
}

// Consumer returns the channel of completed futures, in send order. A future
// that failed carries its error and a zero response.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// Close ends the stream and waits for the receiver to exit. Futures not yet
// completed fail with raft.ErrPipelineShutdown. Close is idempotent.
func (p *pipeline) Close() error {
	p.cancel()
	<-p.finished
	return nil
}

// receive completes the futures in order until the pipeline ends. A stream
// that fails (or a response that does not arrive in time, as a read
// deadline would end NetworkTransport's) fails the oldest future with the
// stream's error, which raft sees on Consumer: it then falls back to plain
// AppendEntries.
func (p *pipeline) receive() {
	defer close(p.finished)
	defer p.failQueued()
	defer p.watch.watchdog.Stop()
	for {
		msg, err := p.stream.Recv()
		if err == nil {
			p.answered()
		}
		var f *appendFuture
		select {
		case f = <-p.inflight:
		default:
			// Nothing was sent: the stream ended while idle. (A response
			// always finds its future, queued before its request was sent.)
			p.cancel()
			return
		}
		if f.unsent.Load() { // its caller got Send's error instead
			f.respond(raft.ErrPipelineShutdown)
			return
		}
		if err != nil {
			f.respond(err)
			p.deliver(f)
			p.cancel()
			return
		}
		*f.resp = decodeAppendEntriesResponse(msg)
		f.respond(nil)
		if !p.deliver(f) {
			return
		}
	}
}

// deliver hands f to Consumer, unless the pipeline ends first; a failed f
// is delivered even then, if Consumer has room, so raft learns why.
func (p *pipeline) deliver(f *appendFuture) bool {
	select {
	case p.done <- f:
		return true
	default:
	}
	select {
	case p.done <- f:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// failQueued fails the futures still queued when the pipeline ends, so no
// one waiting on one blocks forever.
func (p *pipeline) failQueued() {
	for {
		select {
		case f := <-p.inflight:
			f.respond(raft.ErrPipelineShutdown)
		default:
			return
		}
	}
}

// appendFuture is a raft.AppendFuture. err and resp are written once, before
// ch is closed.
type appendFuture struct {
	// unsent is set if Send failed: the caller got the error, not f.
	unsent atomic.Bool
	start  time.Time
	req    *raft.AppendEntriesRequest
	resp   *raft.AppendEntriesResponse
	err    error
	ch     chan struct{}
}

func (f *appendFuture) respond(err error) {
	f.err = err
	close(f.ch)
}

// Error waits for the response and returns its error.
func (f *appendFuture) Error() error {
	<-f.ch
	return f.err
}

// Start returns when the request was sent.
func (f *appendFuture) Start() time.Time { return f.start }

// Request returns the request.
func (f *appendFuture) Request() *raft.AppendEntriesRequest { return f.req }

// Response returns the response; valid once Error returned nil.
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }
