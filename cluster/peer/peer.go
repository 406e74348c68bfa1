// Package peer is a node's side of its peers' peer ports: one gRPC
// connection per peer, the internal services' clients over it, and one
// forwarder per peer that coalesces the shard batches bound for it into
// one Forward call.
package peer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Forwarding coalesces: every peer has one forwarder, and the shard batches
// of concurrent checks bound for that peer travel in one Forward call. No
// call waits on purpose; batches form from whatever queued while the
// previous calls were in flight, so the busier the link the fuller the calls.
const (
	forwardMaxBatches  = 256
	forwardMaxInflight = 8
	forwardQueueLen    = 4 * forwardMaxBatches
)

// ErrShed: the forwarder's queue stayed full until the call's deadline;
// nothing was sent.
var ErrShed = errors.New("peer: forward queue full")

// Metrics receives what the forwarders count.
type Metrics interface {
	// Forwarded counts n batches sent by result ("ok", "error").
	Forwarded(result string, n int)
	// Full counts a call that found the queue full: it waited for a
	// place, or was shed.
	Full(queue string, shed bool)
}

// Set holds a node's peers, by peer address. Use NewSet.
type Set struct {
	metrics  Metrics
	dialOpts []grpc.DialOption // set at construction: credentials, where connections leave from
	queueLen int               // each forwarder's queue bound, set at construction

	mu sync.Mutex
	m  map[string]*Peer // guarded by mu: by peer address
}

// NewSet returns a node's peers, dialled with dialOpts (credentials, the
// address connections leave from).
func NewSet(m Metrics, dialOpts ...grpc.DialOption) *Set {
	return &Set{metrics: m, dialOpts: dialOpts, queueLen: forwardQueueLen, m: map[string]*Peer{}}
}

// Get returns the peer at addr, connecting (lazily) the first time.
func (p *Set) Get(addr string) (*Peer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.m[addr]; ok {
		return f, nil
	}
	conn, err := grpc.NewClient(addr, append(p.dialOpts,
		// A restarted peer must be reachable again within a second, not
		// after gRPC's default reconnect backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second,
		}, MinConnectTimeout: time.Second}))...)
	if err != nil {
		return nil, err
	}
	f := &Peer{conn: conn, Internal: pb.NewInternalClient(conn), Admin: pb.NewAdminClient(conn), queue: make(chan *fwdCall, p.queueLen),
		slots: make(chan struct{}, forwardMaxInflight), stop: make(chan struct{}), metrics: p.metrics}
	go f.run()
	p.m[addr] = f
	return f, nil
}

// Close ends every peer's forwarder and connection.
func (p *Set) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, f := range p.m {
		close(f.stop)
		f.conn.Close()
		delete(p.m, addr)
	}
}

// Peer is one peer: its services' clients and its forwarder.
type Peer struct {
	Internal pb.InternalClient
	Admin    pb.AdminClient // Status, which the peer port serves to nodes

	conn    *grpc.ClientConn
	queue   chan *fwdCall
	slots   chan struct{}
	stop    chan struct{}
	metrics Metrics
	waiting atomic.Int32 // calls waiting for a place in the full queue
}

type fwdCall struct {
	batch    *pb.ShardBatch
	deadline time.Time
	done     chan fwdResult
}

type fwdResult struct {
	reply *pb.ShardReply
	err   error
}

// Unreachable: the call never reached the peer, so nothing was applied.
type Unreachable struct{ Err error }

func (e Unreachable) Error() string { return "peer unreachable: " + e.Err.Error() }

// Forward sends one batch and waits for its reply, sent in one call with
// whatever else queued for the peer meanwhile. An error is ErrShed or
// Unreachable (not applied) or an unknown outcome.
func (f *Peer) Forward(ctx context.Context, b *pb.ShardBatch) (*pb.ShardReply, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	c := &fwdCall{batch: b, deadline: deadline, done: make(chan fwdResult, 1)}
	select {
	case f.queue <- c:
	default:
		if err := f.enqueueFull(ctx, c); err != nil {
			return nil, err
		}
	}
	select {
	case r := <-c.done:
		return r.reply, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// enqueueFull waits for a place in the full queue until ctx ends, and
// counts the wait or the shedding.
func (f *Peer) enqueueFull(ctx context.Context, c *fwdCall) error {
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	select {
	case f.queue <- c:
		f.metrics.Full("forwarder", false)
		return nil
	case <-ctx.Done():
		f.metrics.Full("forwarder", true)
		return ErrShed
	}
}

func (f *Peer) run() {
	for {
		var first *fwdCall
		select {
		case first = <-f.queue:
		case <-f.stop:
			return
		}
		select {
		case f.slots <- struct{}{}:
		case <-f.stop:
			first.done <- fwdResult{err: Unreachable{context.Canceled}}
			return
		}
		calls := []*fwdCall{first}
	gather:
		for len(calls) < forwardMaxBatches {
			select {
			case c := <-f.queue:
				calls = append(calls, c)
			default:
				break gather
			}
		}
		go f.send(calls)
	}
}

func (f *Peer) send(calls []*fwdCall) {
	defer func() { <-f.slots }()
	req := &pb.ForwardRequest{Batches: make([]*pb.ShardBatch, len(calls))}
	deadline := calls[0].deadline
	for i, c := range calls {
		req.Batches[i] = c.batch
		if c.deadline.After(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := f.Internal.Forward(ctx, req)
	if err == nil && len(resp.GetReplies()) != len(calls) {
		err = fmt.Errorf("peer: forward: %d replies for %d batches", len(resp.GetReplies()), len(calls))
	}
	if err != nil {
		if neverSent(err) {
			err = Unreachable{err}
		}
		f.metrics.Forwarded("error", len(calls))
		for _, c := range calls {
			c.done <- fwdResult{err: err}
		}
		return
	}
	f.metrics.Forwarded("ok", len(calls))
	for i, c := range calls {
		c.done <- fwdResult{reply: resp.Replies[i]}
	}
}

// neverSent reports whether a failed call certainly did not reach the peer:
// gRPC fails calls at once, unsent, while the connection cannot be made.
func neverSent(err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	msg := status.Convert(err).Message()
	return strings.Contains(msg, "while dialing") || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "no such host")
}
