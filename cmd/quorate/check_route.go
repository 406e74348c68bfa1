package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// routing is the --route of "quorate check": as given, or by default
// leader with several --addr and any with one.
func (f *checkFlags) routing() (client.Routing, error) {
	if f.route == "" {
		if len(f.addrs) > 1 {
			return client.RouteLeader, nil
		}
		return client.RouteAny, nil
	}
	r, err := client.ParseRouting(f.route)
	if err != nil {
		return 0, fmt.Errorf("--route: %w", err)
	}
	return r, nil
}

// send sends req as --route says. With leader it first learns the cluster
// from the --addr nodes (client.Cluster); with any it sends to the first
// --addr, and to the next only while the ones before certainly never got
// the request (client.Retryable), so a check is never charged twice.
func (f *checkFlags) send(ctx context.Context, req *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	r, err := f.routing()
	if err != nil {
		return nil, err
	}
	opts, err := f.creds.dialOptions()
	if err != nil {
		return nil, err
	}
	if r == client.RouteLeader {
		c, err := client.DialCluster(ctx, f.addrs, client.WithDialOptions(opts...))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.Check(ctx, req)
	}
	err = errors.New("no --addr")
	for _, addr := range f.addrs {
		var c *client.Client
		if c, err = client.Dial(addr, opts...); err != nil {
			return nil, err
		}
		resp, cerr := c.Check(ctx, req)
		c.Close()
		if cerr == nil || !client.Retryable(cerr) {
			return resp, cerr
		}
		err = cerr
	}
	return nil, err
}
