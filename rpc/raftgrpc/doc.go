// Package raftgrpc carries every Raft group of a node over the node's one
// gRPC server, and shares one client connection per peer among all groups.
//
// A quorate node hosts many hashicorp/raft groups: one per shard replica plus
// the meta group, hundreds on a busy node. raft's own NetworkTransport wants a
// listener per group and pools TCP connections per group and peer, so a node
// would need hundreds of ports (each allocated, gossiped and let through
// firewalls) and groups × peers × pool connections, each with its own
// handshake, keepalive and buffers. Here there is one port, the node's gRPC
// port, already open for clients, and one HTTP/2 connection per peer address
// no matter how many groups two nodes share: the connection count grows with
// peers, not with shards, and TLS, keepalive and flow control are set up once.
//
// A Manager is that node-wide piece. Register adds the RaftTransport service
// (quorate.v1.RaftTransport) to the node's gRPC server; Transport(group)
// gives one group its raft.Transport. Every message names its group, and the
// server hands it to that group's consumer channel, so a group is a map entry
// rather than a port. A message for a group the node does not host fails at
// once with codes.NotFound (codes.Unavailable while the group or node shuts
// down), so a leader whose follower has not created the group yet backs off
// like for any failed RPC instead of hanging.
//
// The RPCs map onto raft's as follows. AppendEntries, RequestVote,
// RequestPreVote and TimeoutNow are unary calls with a deadline. Pipelined
// replication (raft.AppendPipeline) is one bidirectional stream per group and
// follower: requests go out without waiting, responses come back in order.
// InstallSnapshot is a client stream: the request in the first message, the
// snapshot bytes in chunks. Heartbeats skip the consumer channel when raft
// installs a heartbeat handler, as with NetworkTransport, so a follower busy
// with disk I/O still answers them.
//
// The price of sharing: all groups between two nodes share one TCP stream, so
// a large snapshot or a burst of appends in one group can delay another
// group's heartbeats by up to the HTTP/2 flow-control window in flight. Keep
// election timeouts well above the time one window takes on the wire. The
// server must also accept messages as large as the biggest AppendEntries
// batch (grpc.MaxRecvMsgSize), since log entries are not chunked.
//
// Typical wiring, once per node:
//
//	m := raftgrpc.NewManager(raft.ServerAddress(advertiseAddr))
//	m.Register(grpcServer)
//	trans, err := m.Transport("shard-17")
//	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
//	...
//	r.Shutdown().Error() // closes trans; "shard-17" may be registered again
//	m.Close()
package raftgrpc
