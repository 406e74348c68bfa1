package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// Client is a connection to one quorate node. It is safe for concurrent use;
// share one per address rather than dialling per call.
type Client struct {
	conn   *grpc.ClientConn
	rl     quoratev1.RateLimiterClient
	admin  quoratev1.AdminClient
	gw     quoratev1.GatewayClient
	health healthpb.HealthClient
}

// Dial returns a Client for the node at addr (host:port, or any target
// grpc.NewClient accepts). It does not wait for the connection: the first
// call connects, and fails with UNAVAILABLE if the node cannot be reached.
// Without options the connection is plaintext; opts are applied after that
// default, so grpc.WithTransportCredentials in opts replaces it.
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	all := make([]grpc.DialOption, 0, len(opts)+1)
	all = append(all, grpc.WithTransportCredentials(insecure.NewCredentials()))
	all = append(all, opts...)
	conn, err := grpc.NewClient(addr, all...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	return &Client{
		conn:   conn,
		rl:     quoratev1.NewRateLimiterClient(conn),
		admin:  quoratev1.NewAdminClient(conn),
		gw:     quoratev1.NewGatewayClient(conn),
		health: healthpb.NewHealthClient(conn),
	}, nil
}

// Check asks the node to decide req (RateLimiter.Check). Errors are gRPC
// status errors, returned unwrapped so status.Code works on them.
func (c *Client) Check(ctx context.Context, req *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	return c.rl.Check(ctx, req)
}

// Status returns the cluster as the node sees it (Admin.Status).
func (c *Client) Status(ctx context.Context) (*quoratev1.StatusResponse, error) {
	return c.admin.Status(ctx, &quoratev1.StatusRequest{})
}

// Leave takes the node out of the cluster (Admin.Leave; an admin-scope
// token): the meta leader moves the node's replicas to the other nodes, and
// the call returns once none is left, with the cluster record's epoch at that
// point; the node then exits by itself. If ctx ends first the call fails with
// DEADLINE_EXCEEDED (or CANCELED), and a leave under way goes on without it
// (Status shows the node's membership and the moves in progress). It fails
// with FAILED_PRECONDITION if fewer nodes than the replication factor would
// remain. Errors are gRPC status errors, returned unwrapped.
func (c *Client) Leave(ctx context.Context) (*quoratev1.LeaveResponse, error) {
	return c.admin.Leave(ctx, &quoratev1.LeaveRequest{})
}

// Health asks the node's gRPC health service about the server as a whole. It
// returns nil if the node reports SERVING, and an error otherwise: the gRPC
// error of the call, or one wrapping ErrNotServing with the reported status.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%w: %s", ErrNotServing, s)
	}
	return nil
}

// Conn returns the underlying connection, for calling other services the
// node serves or for watching its state.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection; calls in flight fail with CANCELED.
func (c *Client) Close() error { return c.conn.Close() }
