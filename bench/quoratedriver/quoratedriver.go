// Package quoratedriver is quorate bench's driver for a quorate cluster: it
// sends each request as one RateLimiter.Check through the Go client SDK
// (rpc/client), in strict or leased mode, spreading requests round-robin
// over the nodes it was given, as a fleet of clients would, or (NewRouted)
// sending strict checks to their shard's leader.
package quoratedriver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/bench"
	"github.com/quorate/quorate/rpc/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Driver is a bench.Driver for quorate.
type Driver struct {
	mode    pb.Mode
	clients []*client.Client
	next    atomic.Uint64 // round-robin position

	routed *client.Cluster // when set, strict checks go to their shard's leader (route.go)

	// limits caches each Limit's wire form: the same few limits are sent
	// millions of times, and parsing the algorithm name every time would
	// show up in the tool's own CPU.
	limits sync.Map // *bench.Limit → *wireLimit
}

type wireLimit struct {
	algorithm pb.Algorithm
	period    *durationpb.Duration
	fail      pb.FailMode
	err       error
}

// New returns a driver that sends checks in mode ("strict" or "leased") to
// the nodes at addrs (gRPC host:port). It does not connect yet: the first
// check does.
func New(addrs []string, mode string) (*Driver, error) {
	if len(addrs) == 0 {
		return nil, errors.New("quoratedriver: no node addresses")
	}
	m, err := client.ParseMode(mode)
	if err != nil {
		return nil, fmt.Errorf("quoratedriver: %w", err)
	}
	d := &Driver{mode: m}
	for _, a := range addrs {
		c, err := client.Dial(a)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("quoratedriver: %w", err)
		}
		d.clients = append(d.clients, c)
	}
	return d, nil
}

// Check sends one CheckRequest with one item per bench.Item.
func (d *Driver) Check(ctx context.Context, items []bench.Item, out []bench.Outcome) error {
	req := &pb.CheckRequest{Mode: d.mode, Items: make([]*pb.Item, len(items))}
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
	resp, err := d.send(ctx, req) // route.go
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

// Close closes the connections.
func (d *Driver) Close() error {
	var errs []error
	for _, c := range d.clients {
		errs = append(errs, c.Close())
	}
	if d.routed != nil {
		errs = append(errs, d.routed.Close())
	}
	return errors.Join(errs...)
}
