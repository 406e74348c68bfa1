// Package embeddeddriver is quorate bench's driver for the limiter
// embedded in a gateway (client.Embedded): the bench process holds
// several embedded limiters, each with its own connections and leases as
// separate gateways would, and spreads the requests over them round-robin.
// Leased checks are decided in-process; strict ones, and lease grants, go
// to the cluster through the Gateway service. Answers are accounted like
// the other drivers' (a lease's decisions are prepaid).
package embeddeddriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/bench"
	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
)

// Options configure Open.
type Options struct {
	// Mode is strict or leased, as the other drivers take it.
	Mode string
	// Gateways is the number of embedded limiters (default 3).
	Gateways int
	// DialOptions are added to every connection: TLS and a token with the
	// lease scope.
	DialOptions []grpc.DialOption
}

// Driver is a bench.Driver over embedded limiters.
type Driver struct {
	leased   bool
	clusters []*client.Cluster
	gws      []*client.Embedded
	next     atomic.Uint64
}

// Open starts o.Gateways embedded limiters on the cluster at addrs and
// waits, within ctx, for each to have the cluster's routing.
func Open(ctx context.Context, addrs []string, o Options) (*Driver, error) {
	if len(addrs) == 0 {
		return nil, errors.New("embeddeddriver: no node addresses")
	}
	if o.Gateways <= 0 {
		o.Gateways = 3
	}
	mode, err := client.ParseMode(o.Mode)
	if err != nil {
		return nil, fmt.Errorf("embeddeddriver: %w", err)
	}
	d := &Driver{leased: client.ModeName(mode) == "leased"}
	for i := range o.Gateways {
		cl, err := client.DialCluster(ctx, addrs, client.WithDialOptions(o.DialOptions...))
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("embeddeddriver: %w", err)
		}
		d.clusters = append(d.clusters, cl)
		e, err := client.NewEmbedded(ctx, cl, client.EmbeddedConfig{Holder: "bench-gw-" + strconv.Itoa(i+1)})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("embeddeddriver: gateway %d: %w", i+1, err)
		}
		d.gws = append(d.gws, e)
	}
	return d, nil
}

// Check decides items at the next embedded limiter.
func (d *Driver) Check(ctx context.Context, items []bench.Item, out []bench.Outcome) error {
	req := &decide.Request{Mode: decide.Strict, Items: make([]decide.Item, len(items))}
	if d.leased {
		req.Mode = decide.Leased
	}
	for i, it := range items {
		alg, err := fsm.ParseAlgorithm(it.Limit.Algorithm)
		if err != nil {
			return fmt.Errorf("embeddeddriver: %w", err)
		}
		fail := decide.FailClosedMode
		if it.Limit.FailOpen {
			fail = decide.FailOpenMode
		}
		req.Items[i] = decide.Item{Name: it.Name, Key: it.Key, Algorithm: alg, Limit: it.Limit.Limit,
			Period: it.Limit.Period, HasPeriod: true, Burst: it.Limit.Burst, Cost: it.Cost, Fail: fail}
	}
	gw := d.gws[(d.next.Add(1)-1)%uint64(len(d.gws))]
	ans, err := gw.Check(ctx, req)
	if err != nil {
		return err
	}
	for i, r := range ans.Results {
		why := reason(r.Reason)
		out[i] = bench.Outcome{Allowed: r.Decision == decide.Allow, Reason: why, Remaining: r.Remaining,
			DecidedAt: r.DecidedAt,
			Prepaid:   d.leased && r.Index == 0 && (why == bench.ReasonWithinLimit || why == bench.ReasonOverLimit)}
	}
	return nil
}

func reason(r decide.Reason) bench.Reason {
	switch r {
	case decide.WithinLimit:
		return bench.ReasonWithinLimit
	case decide.OverLimit:
		return bench.ReasonOverLimit
	case decide.FailOpen:
		return bench.ReasonFailOpen
	case decide.Unavailable:
		return bench.ReasonUnavailable
	case decide.Refunded:
		return bench.ReasonRefunded
	}
	return bench.ReasonUnknown
}

// Close returns the gateways' leases and closes their connections.
func (d *Driver) Close() error {
	for _, g := range d.gws {
		g.Close()
	}
	for _, c := range d.clusters {
		_ = c.Close()
	}
	return nil
}
