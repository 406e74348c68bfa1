package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Routing says where a Cluster sends a check.
type Routing int

const (
	// RouteLeader sends a strict check to the node that leads the shard of
	// its items (of most of its items, when they span shards), so the node
	// decides it without forwarding; leased checks, which any node decides
	// from its own leases, go round-robin over the nodes. The default.
	RouteLeader Routing = iota
	// RouteAny sends every check round-robin over the nodes, as a fleet of
	// single-node clients would: a node that does not lead a strict check's
	// shard forwards it, one hop more. For comparison.
	RouteAny
)

// ErrUnknownRouting: the name is not leader or any.
var ErrUnknownRouting = errors.New("client: unknown routing")

// ParseRouting returns the routing called s: "leader" or "any", in any case.
func ParseRouting(s string) (Routing, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "leader":
		return RouteLeader, nil
	case "any":
		return RouteAny, nil
	}
	return 0, fmt.Errorf("%w %q (want leader or any)", ErrUnknownRouting, s)
}

// String is the name ParseRouting accepts.
func (r Routing) String() string {
	switch r {
	case RouteLeader:
		return "leader"
	case RouteAny:
		return "any"
	}
	return fmt.Sprintf("Routing(%d)", int(r))
}

// ClusterOption configures DialCluster.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	routing       Routing
	refresh       time.Duration // mean time between background refreshes; < 0: none
	minGap        time.Duration // least time between two refreshes
	statusTimeout time.Duration // of one Admin.Status call
	dialOpts      []grpc.DialOption
	failLocally   bool // WithLocalFailModes
}

// Defaults of the options.
const (
	// DefaultRefreshInterval is the mean time between background topology
	// refreshes; each wait is drawn uniformly from [2/3, 4/3] of it, so
	// clients started together do not ask in step.
	DefaultRefreshInterval = 1500 * time.Millisecond
	// MinRefreshGap is the least time between two refreshes: refreshes
	// triggered by failures or leader hints wait for it, so a burst of them
	// costs one round of Admin.Status calls.
	MinRefreshGap = 200 * time.Millisecond
	// statusTimeout bounds one Admin.Status call of a refresh.
	statusTimeout = time.Second
)

func defaultClusterConfig() clusterConfig {
	return clusterConfig{routing: RouteLeader, refresh: DefaultRefreshInterval, minGap: MinRefreshGap, statusTimeout: statusTimeout}
}

// WithRouting sets where checks go (default RouteLeader).
func WithRouting(r Routing) ClusterOption {
	return func(c *clusterConfig) { c.routing = r }
}

// WithRefreshInterval sets the mean time between background topology
// refreshes (default DefaultRefreshInterval). Zero means the default; a
// negative interval turns background refreshes off, leaving the ones that
// failures and leader hints trigger.
func WithRefreshInterval(d time.Duration) ClusterOption {
	return func(c *clusterConfig) {
		switch {
		case d == 0:
			c.refresh = DefaultRefreshInterval
		default:
			c.refresh = d
		}
	}
}

// WithLocalFailModes makes Check answer a request of inline items by each
// item's fail mode when no node of the cluster could be reached (every
// node refused the connection): ALLOW with reason FAIL_OPEN for an open
// item, DENY with UNAVAILABLE for a closed one, as a node answers for a
// shard that cannot decide. Without it, Check returns the error. A
// descriptor check still fails: its fail modes are the policies', which
// only a limiter holding the policy set knows (NewEmbedded).
func WithLocalFailModes() ClusterOption {
	return func(c *clusterConfig) { c.failLocally = true }
}

// WithDialOptions adds options to every node connection, after the
// defaults (plaintext, and reconnection within a second of a node coming
// back): grpc.WithTransportCredentials here replaces plaintext.
func WithDialOptions(opts ...grpc.DialOption) ClusterOption {
	return func(c *clusterConfig) { c.dialOpts = append(c.dialOpts, opts...) }
}

// Retryable reports whether err proves that a call never reached the
// server, so that sending the same request again, to any node, cannot
// charge it twice: a gRPC UNAVAILABLE raised on this side because no
// connection could be made (connection refused, a failed dial, a name that
// does not resolve). Every other error may hide a request that was applied:
// UNAVAILABLE after the request was written (the connection broke mid-call:
// "transport is closing", "error reading from server"), DEADLINE_EXCEEDED,
// CANCELED, and any error the server itself returned. The cluster's own
// forwarding follows the same rule.
func Retryable(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	msg := st.Message()
	return strings.Contains(msg, "while dialing") || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "no such host")
}
