package cluster

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

// errForwardShed: the forwarder's queue stayed full until the call's
// deadline; nothing was sent.
var errForwardShed = errors.New("cluster: forward queue full")

type peers struct {
	metrics  *metrics
	dialOpts []grpc.DialOption // set at construction: credentials, where connections leave from
	queueLen int               // each forwarder's queue bound, set at construction

	mu sync.Mutex
	m  map[string]*forwarder // guarded by mu: by peer address
}

func newPeers(m *metrics, dialOpts ...grpc.DialOption) *peers {
	return &peers{metrics: m, dialOpts: dialOpts, queueLen: forwardQueueLen, m: map[string]*forwarder{}}
}

func (p *peers) get(addr string) (*forwarder, error) {
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
	f := &forwarder{conn: conn, client: pb.NewInternalClient(conn), queue: make(chan *fwdCall, p.queueLen),
		slots: make(chan struct{}, forwardMaxInflight), stop: make(chan struct{}), metrics: p.metrics}
	go f.run()
	p.m[addr] = f
	return f, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, f := range p.m {
		close(f.stop)
		f.conn.Close()
		delete(p.m, addr)
	}
}

type forwarder struct {
	conn    *grpc.ClientConn
	client  pb.InternalClient
	queue   chan *fwdCall
	slots   chan struct{}
	stop    chan struct{}
	metrics *metrics
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

// errUnreachable: the call never reached the peer, so nothing was applied.
type errUnreachable struct{ err error }

func (e errUnreachable) Error() string { return "peer unreachable: " + e.err.Error() }

// forward sends one batch and waits for its reply. An error is either
// errUnreachable (not applied) or an unknown outcome.
func (f *forwarder) forward(ctx context.Context, b *pb.ShardBatch) (*pb.ShardReply, error) {
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
func (f *forwarder) enqueueFull(ctx context.Context, c *fwdCall) error {
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	select {
	case f.queue <- c:
		f.metrics.Full("forwarder", false)
		return nil
	case <-ctx.Done():
		f.metrics.Full("forwarder", true)
		return errForwardShed
	}
}

func (f *forwarder) run() {
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
			first.done <- fwdResult{err: errUnreachable{context.Canceled}}
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

func (f *forwarder) send(calls []*fwdCall) {
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
	resp, err := f.client.Forward(ctx, req)
	if err == nil && len(resp.GetReplies()) != len(calls) {
		err = fmt.Errorf("cluster: forward: %d replies for %d batches", len(resp.GetReplies()), len(calls))
	}
	if err != nil {
		if neverSent(err) {
			err = errUnreachable{err}
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
