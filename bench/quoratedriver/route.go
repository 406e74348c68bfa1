package quoratedriver

import (
	"context"
	"fmt"

	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Routes: where strict checks go.
const (
	// RouteLeader sends each strict check to the node leading its shard
	// (most of its items' shard), through a client.Cluster: one hop.
	RouteLeader = "leader"
	// RouteAny spreads strict checks round-robin over the nodes given,
	// which forward what they do not lead: two hops for most checks.
	RouteAny = "any"
)

// NewRouted returns a driver like Open, whose strict unary checks go where
// route says. Leased checks are decided by any node and always go
// round-robin, and so do streams. With RouteLeader it learns the cluster
// from the nodes at addrs first, within ctx.
func NewRouted(ctx context.Context, addrs []string, o Options, route string) (*Driver, error) {
	r, err := client.ParseRouting(route)
	if err != nil {
		return nil, fmt.Errorf("quoratedriver: %w", err)
	}
	d, err := Open(addrs, o)
	if err != nil {
		return nil, err
	}
	if r == client.RouteLeader && d.mode != pb.Mode_MODE_LEASED && len(d.streams) == 0 {
		if d.routed, err = client.DialCluster(ctx, addrs, client.WithDialOptions(o.DialOptions...)); err != nil {
			d.Close()
			return nil, fmt.Errorf("quoratedriver: %w", err)
		}
	}
	return d, nil
}

// send sends req where the driver's route says.
func (d *Driver) send(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	if d.routed != nil {
		return d.routed.Check(ctx, req)
	}
	return d.clients[(d.next.Add(1)-1)%uint64(len(d.clients))].Check(ctx, req)
}
