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
// The RPCs map onto raft's as follows. RequestVote, RequestPreVote,
// TimeoutNow and AppendEntries other than heartbeats are unary calls with a
// deadline. Pipelined replication (raft.AppendPipeline) is one
// bidirectional stream per group and follower: requests go out without
// waiting, responses come back in order. InstallSnapshot is a client stream:
// the request in the first message, the snapshot bytes in chunks.
//
// Heartbeats, most of an idle node's traffic (raft sends one every
// HeartbeatTimeout/10 per group and follower), do not get a call each: all
// groups' heartbeats to one peer travel on one long-lived bidirectional
// stream per peer (Heartbeats), as entries of small messages holding only
// what raft's heartbeat carries (term, leader address and id, protocol
// version), each tagged with an id that its answer carries back. Heartbeats
// queued while a message is being sent share the next one; when heartbeats
// to a peer are dense (many groups) the first waits a short gather window
// (2ms) for others due at the same time. A stream that breaks fails the
// heartbeats it carries, like a failed call (raft backs off), and the next
// heartbeat opens a new one. A peer without the Heartbeats RPC (an older
// version answers Unimplemented) gets unary AppendEntries heartbeats, and
// the stream is tried again a minute later.
//
// On the receiving side, heartbeats skip the consumer channel when raft
// installs a heartbeat handler, as with NetworkTransport, so a follower busy
// with disk I/O still answers them. The heartbeat stream calls that handler
// in line, answering a message's heartbeats together, for heartbeats of a
// term the group has already answered; the first heartbeat of a new term
// (which raft persists before answering), one for a group without a handler
// and one the handler answers late are answered separately from their own
// goroutine, so one slow group never holds up the others. A heartbeat for a
// group the node does not host is answered NotFound, as a call would be.
//
// Flow control: gRPC's default dynamic window (bandwidth-delay probing)
// answers nearly every small message received with a PING and its ACK,
// doubling the frames of heartbeat traffic. Connections to peers use static
// windows, and ServerOptions gives the node's gRPC server the same.
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
//	grpcServer := grpc.NewServer(raftgrpc.ServerOptions()...)
//	m := raftgrpc.NewManager(raft.ServerAddress(advertiseAddr))
//	m.Register(grpcServer)
//	trans, err := m.Transport("shard-17")
//	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
//	...
//	r.Shutdown().Error() // closes trans; "shard-17" may be registered again
//	m.Close()
package raftgrpc
