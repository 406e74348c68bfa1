package raftgrpc

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// pipeline is a raft.AppendPipeline over one bidirectional stream. The caller
// sends requests without waiting; one receiver goroutine matches responses to
// requests in order (the server answers in order) and hands the completed
// futures to Consumer.
//
// sendMu serializes Send with queueing the future, so the queue order is the
// send order. The receiver owns the stream's receive side.
type pipeline struct {
	group   string
	stream  quoratev1.RaftTransport_AppendEntriesPipelineClient
	timeout time.Duration

	// ctx ends the stream; cancel is called by Close, by a response timeout
	// and by the transport's Close (through the parent context).
	ctx    context.Context
	cancel context.CancelFunc

	sendMu   sync.Mutex
	inflight chan *appendFuture     // sent, awaiting a response, in send order
	done     chan raft.AppendFuture // completed, for Consumer
	finished chan struct{}          // closed when receive returns
}

func newPipeline(ctx context.Context, cancel context.CancelFunc, group string, stream quoratev1.RaftTransport_AppendEntriesPipelineClient, timeout time.Duration) *pipeline {
	return &pipeline{
		group:    group,
		stream:   stream,
		timeout:  timeout,
		ctx:      ctx,
		cancel:   cancel,
		inflight: make(chan *appendFuture, pipelineMaxInFlight),
		done:     make(chan raft.AppendFuture, pipelineMaxInFlight),
		finished: make(chan struct{}),
	}
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
	if err := p.stream.Send(encodeAppendEntriesRequest(p.group, args)); err != nil {
		if p.ctx.Err() != nil {
			return nil, raft.ErrPipelineShutdown
		}
		return nil, err
	}
	select {
	case p.inflight <- f:
		return f, nil
	case <-p.ctx.Done():
		return nil, raft.ErrPipelineShutdown
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

// receive completes the futures in order until the pipeline is closed.
func (p *pipeline) receive() {
	defer close(p.finished)
	defer p.failQueued()
	for {
		var f *appendFuture
		select {
		case f = <-p.inflight:
		case <-p.ctx.Done():
			return
		}
		f.respond(p.recv(f.resp))
		select {
		case p.done <- f:
		case <-p.ctx.Done():
			return
		}
	}
}

// recv reads the next response into resp. A response that does not arrive
// within the timeout ends the pipeline, as a read deadline would end
// NetworkTransport's: raft then falls back to plain AppendEntries.
func (p *pipeline) recv(resp *raft.AppendEntriesResponse) error {
	timer := time.AfterFunc(p.timeout, p.cancel)
	defer timer.Stop()
	msg, err := p.stream.Recv()
	if err != nil {
		return err
	}
	*resp = decodeAppendEntriesResponse(msg)
	return nil
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
	start time.Time
	req   *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	err   error
	ch    chan struct{}
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
