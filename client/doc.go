// Package client is the Go SDK for a quorate cluster: a thin gRPC client for
// the public RateLimiter API, the Admin API and the standard gRPC health
// service, plus helpers that turn the names users type (token_bucket,
// strict, open, ...) into the wire enums and back.
//
// A Client talks to one node. Any node answers any check (it forwards to the
// shard's leader), so one address is enough to start. Nodes serve TLS only,
// and, once they have a tokens file, want a token with the check scope:
//
//	ca, err := client.WithCAFile("data/credentials/ca.crt")
//	if err != nil { ... }
//	c, err := client.Dial("127.0.0.1:7401", ca, client.WithToken(token))
//	if err != nil { ... }
//	defer c.Close()
//	alg, _ := client.ParseAlgorithm("token_bucket")
//	resp, err := c.Check(ctx, &quoratev1.CheckRequest{
//		Items: []*quoratev1.Item{{
//			Name: "api", Key: "user:42", Algorithm: alg,
//			Limit: 100, Period: durationpb.New(time.Minute),
//		}},
//	})
//
// A Cluster talks to every node and knows the topology (shard count, shard
// leaders, node addresses, from Admin.Status): it sends each strict check
// straight to the leader of its items' shard, saving the hop a node that
// does not lead the shard spends forwarding it, spreads leased checks over
// the nodes, and goes to another node when one cannot be reached:
//
//	c, err := client.DialCluster(ctx, []string{"10.0.0.1:7401", "10.0.0.2:7401"})
//	if err != nil { ... }
//	defer c.Close()
//	resp, err := c.Check(ctx, req)
//
// A caller with many checks in flight at once (a gateway) can share one
// stream (RateLimiter.CheckStream) among its goroutines instead of making a
// unary call per check:
//
//	s, err := c.CheckStream(ctx)
//	if err != nil { ... }
//	defer s.Close()
//	resp, err := s.Check(reqCtx, req) // from any number of goroutines
//
// A stream that breaks fails every check waiting on it with an error
// wrapping ErrStreamBroken; open a new one.
//
// Errors from the server keep their gRPC status: use status.Code(err) to tell
// INVALID_ARGUMENT (bad input, nothing charged) from UNAVAILABLE (node down).
package client
