package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/internal/cliview"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// pollInterval is how often --wait asks each node for its version: fine
// enough to time propagation in milliseconds, cheap for a few seconds.
const pollInterval = 5 * time.Millisecond

// versionProbe asks one node for the version a --wait waits for. An error
// wrapping errNotYet is no news about the node, only that it has not got
// there.
type versionProbe func(ctx context.Context, c *client.Client) (uint64, error)

var errNotYet = errors.New("not there yet")

// policyVersion is the policy set version a node decides with.
func policyVersion(ctx context.Context, c *client.Client) (uint64, error) {
	st, err := c.Status(ctx)
	return st.GetPolicyVersion(), err
}

// tenantVersion is the assignment version a node answers tenant id with.
// A node that does not know the tenant yet is behind, not failing.
func tenantVersion(id string) versionProbe {
	return func(ctx context.Context, c *client.Client) (uint64, error) {
		resp, err := pb.NewAdminClient(c.Conn()).GetTenant(ctx, &pb.GetTenantRequest{TenantId: id})
		if status.Code(err) == codes.NotFound {
			return 0, errNotYet
		}
		return resp.GetVersion(), err
	}
}

// waitVersion waits, at most timeout, until every node --addr knows of
// that may be up reaches version as probe reads it, says how long each
// took after since, and returns the nodes that did not, as cliview.Waits
// words them. Each command words its own failure.
func (a *app) waitVersion(ctx context.Context, f *adminFlags, timeout time.Duration, probe versionProbe, version uint64, since time.Time) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var st *pb.StatusResponse
	err := f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
		st, err = ac.Status(ctx, &pb.StatusRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	opts, _ := f.creds.dialOptions() // call checked them
	return cliview.Waits(a.stdout, waitNodes(ctx, st.GetNodes(), probe, version, since, opts)), nil
}

// waitNodes polls every node that may be up, in parallel; the answer is
// in the nodes' order.
func waitNodes(ctx context.Context, nodes []*pb.NodeStatus, probe versionProbe, version uint64, since time.Time, opts []grpc.DialOption) []cliview.NodeWait {
	var live []*pb.NodeStatus
	for _, n := range nodes {
		if s := n.GetState(); n.GetRpcAddr() != "" && s != pb.NodeState_NODE_STATE_DEAD && s != pb.NodeState_NODE_STATE_LEFT {
			live = append(live, n)
		}
	}
	waits := make([]cliview.NodeWait, len(live))
	var wg sync.WaitGroup
	for i, n := range live {
		wg.Go(func() { waits[i] = waitNode(ctx, n, probe, version, since, opts) })
	}
	wg.Wait()
	return waits
}

func waitNode(ctx context.Context, n *pb.NodeStatus, probe versionProbe, version uint64, since time.Time, opts []grpc.DialOption) cliview.NodeWait {
	w := cliview.NodeWait{ID: n.GetId()}
	c, err := client.Dial(n.GetRpcAddr(), opts...)
	if err != nil {
		w.Err = err
		return w
	}
	defer c.Close()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		v, err := probe(ctx, c)
		switch {
		case err == nil && v >= version:
			w.Live, w.Took = true, time.Since(since)
			return w
		case err == nil:
			w.Answered, w.Version, w.Err = true, v, nil
		case status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, errNotYet) && ctx.Err() == nil:
			// The wait's own deadline is no news about the node (the
			// server's timer can fire before ours).
			w.Err = err
		}
		select {
		case <-ctx.Done():
			return w
		case <-tick.C:
		}
	}
}
