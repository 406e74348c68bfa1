// Package quoratedriver is quorate bench's driver for a quorate cluster (or
// any server of its RateLimiter API, such as the noop baseline): it sends
// each request through the Go client SDK (client), in strict or leased
// mode, spreading requests round-robin over the nodes it was given, as a
// fleet of clients would, or (NewRouted) sending strict checks to their
// shard's leader. With API unary each request is one RateLimiter.Check
// call; with API stream it goes on one of a few CheckStream streams per
// node, shared by all the run's clients, as a gateway would send them
// (streams are not routed).
package quoratedriver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/bench"
	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The APIs a driver can send checks through.
const (
	APIUnary  = "unary"  // RateLimiter.Check, one call per request
	APIStream = "stream" // RateLimiter.CheckStream, shared streams
)

// Options configure Open.
type Options struct {
	// Mode is strict or leased.
	Mode string
	// API is APIUnary ("" too) or APIStream.
	API string
	// StreamsPerNode is how many streams to each node the clients share,
	// with APIStream (default 1).
	StreamsPerNode int
	// DialOptions are added to every connection: TLS and a token
	// (client.WithCAFile, client.WithToken).
	DialOptions []grpc.DialOption
}

// Driver is a bench.Driver for quorate.
type Driver struct {
	mode    pb.Mode
	clients []*client.Client
	next    atomic.Uint64 // round-robin position
	// streams, with APIStream: StreamsPerNode per client, in client
	// order; each is reopened when it breaks.
	streams []*streamSlot

	routed *client.Cluster // when set, strict checks go to their shard's leader (route.go)

	// limits caches each Limit's wire form: the same few limits are sent
	// millions of times, and parsing the algorithm name every time would
	// show up in the tool's own CPU.
	limits sync.Map // *bench.Limit → *wireLimit

	// Every request carries an id, as a gateway's do, so that the nodes'
	// decision logs name it: bench-<run>-<n>.
	idPrefix string
	ids      atomic.Uint64
}

type wireLimit struct {
	algorithm pb.Algorithm
	period    *durationpb.Duration
	fail      pb.FailMode
	err       error
}

// New returns a driver that sends checks in mode ("strict" or "leased") to
// the nodes at addrs (gRPC host:port), one Check call each. It does not
// connect yet: the first check does.
func New(addrs []string, mode string) (*Driver, error) {
	return Open(addrs, Options{Mode: mode})
}

// Open returns a driver for the nodes at addrs (gRPC host:port). It does
// not connect yet: the first check does (and opens the streams).
func Open(addrs []string, o Options) (*Driver, error) {
	if len(addrs) == 0 {
		return nil, errors.New("quoratedriver: no node addresses")
	}
	m, err := client.ParseMode(o.Mode)
	if err != nil {
		return nil, fmt.Errorf("quoratedriver: %w", err)
	}
	streams := 0
	switch o.API {
	case "", APIUnary:
	case APIStream:
		streams = max(o.StreamsPerNode, 1)
	default:
		return nil, fmt.Errorf("quoratedriver: API %q: want %s or %s", o.API, APIUnary, APIStream)
	}
	d := &Driver{mode: m, idPrefix: fmt.Sprintf("bench-%06x-", rand.Uint32()&0xffffff)}
	for _, a := range addrs {
		c, err := client.Dial(a, o.DialOptions...)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("quoratedriver: %w", err)
		}
		d.clients = append(d.clients, c)
		for range streams {
			d.streams = append(d.streams, &streamSlot{c: c})
		}
	}
	return d, nil
}

// streamSlot is one shared stream, opened on first use and again after it
// breaks.
type streamSlot struct {
	c  *client.Client
	mu sync.Mutex
	s  *client.Stream // nil until opened; replaced when done
}

// stream returns the slot's open stream, opening one if there is none or
// the last one ended.
func (sl *streamSlot) stream() (*client.Stream, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.s != nil {
		select {
		case <-sl.s.Done():
		default:
			return sl.s, nil
		}
	}
	// The stream outlives any one check: it is ended by Close.
	s, err := sl.c.CheckStream(context.Background())
	if err != nil {
		return nil, err
	}
	sl.s = s
	return s, nil
}

func (sl *streamSlot) close() error {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.s == nil {
		return nil
	}
	err := sl.s.Close()
	sl.s = nil
	if errors.Is(err, client.ErrStreamBroken) {
		return nil // it already failed its checks, which the run counted
	}
	return err
}

// Check sends one CheckRequest with one item per bench.Item.
func (d *Driver) Check(ctx context.Context, items []bench.Item, out []bench.Outcome) error {
	req := &pb.CheckRequest{Mode: d.mode, Items: make([]*pb.Item, len(items)), RequestId: d.idPrefix + strconv.FormatUint(d.ids.Add(1), 10)}
	for i, it := range items {
		w, err := d.wire(it.Limit)
		if err != nil {
			return err
		}
		req.Items[i] = &pb.Item{
			Name: it.Name, Key: it.Key, Algorithm: w.algorithm,
			Limit: it.Limit.Limit, Period: w.period, Burst: it.Limit.Burst,
			Cost: it.Cost, Fail: w.fail,
		}
	}
	var resp *pb.CheckResponse
	var err error
	if len(d.streams) > 0 {
		sl := d.streams[(d.next.Add(1)-1)%uint64(len(d.streams))]
		var s *client.Stream
		if s, err = sl.stream(); err == nil {
			resp, err = s.Check(ctx, req)
		}
	} else {
		resp, err = d.send(ctx, req) // route.go
	}
	if err != nil {
		return err
	}
	res := resp.GetResults()
	if len(res) != len(items) {
		return status.Errorf(codes.Internal, "server returned %d results for %d items", len(res), len(items))
	}
	for i, r := range res {
		why := reason(r.GetReason())
		out[i] = bench.Outcome{
			Allowed:   r.GetDecision() == pb.Decision_DECISION_ALLOW,
			Reason:    why,
			Remaining: r.GetRemaining(),
			DecidedAt: r.GetDecidedAtUnixNano(),
			// A leased decision is not in the Raft log (index 0): it was
			// paid for by a lease granted earlier.
			Prepaid: d.mode == pb.Mode_MODE_LEASED && r.GetIndex() == 0 &&
				(why == bench.ReasonWithinLimit || why == bench.ReasonOverLimit),
		}
	}
	return nil
}

func (d *Driver) wire(l *bench.Limit) (*wireLimit, error) {
	if w, ok := d.limits.Load(l); ok {
		return w.(*wireLimit), w.(*wireLimit).err
	}
	w := &wireLimit{period: durationpb.New(l.Period), fail: pb.FailMode_FAIL_MODE_CLOSED}
	if l.FailOpen {
		w.fail = pb.FailMode_FAIL_MODE_OPEN
	}
	w.algorithm, w.err = client.ParseAlgorithm(l.Algorithm)
	if w.err != nil {
		w.err = status.Error(codes.InvalidArgument, w.err.Error())
	}
	// The period message is shared by concurrent requests: gRPC only reads
	// it while marshalling.
	d.limits.Store(l, w)
	return w, w.err
}

func reason(r pb.Reason) bench.Reason {
	switch r {
	case pb.Reason_REASON_WITHIN_LIMIT:
		return bench.ReasonWithinLimit
	case pb.Reason_REASON_OVER_LIMIT:
		return bench.ReasonOverLimit
	case pb.Reason_REASON_FAIL_OPEN:
		return bench.ReasonFailOpen
	case pb.Reason_REASON_UNAVAILABLE:
		return bench.ReasonUnavailable
	case pb.Reason_REASON_REFUNDED:
		return bench.ReasonRefunded
	}
	return bench.ReasonUnknown
}

// Close ends the streams, then closes the connections.
func (d *Driver) Close() error {
	var errs []error
	for _, sl := range d.streams {
		errs = append(errs, sl.close())
	}
	for _, c := range d.clients {
		errs = append(errs, c.Close())
	}
	if d.routed != nil {
		errs = append(errs, d.routed.Close())
	}
	return errors.Join(errs...)
}
