// Package shard is Raft hosting on one node: each group is hashicorp/raft
// with its log in the node's shared write-ahead log (package raftlog), a
// raft-boltdb stable store and a file snapshot store under the group's
// directory, the adapter that applies replicated commands to an
// fsm.Machine, and the leader's group commit; Host holds a node's groups.
//
// Group is the Raft plumbing, usable with any raft.FSM, or with a
// StateMachine that knows nothing of Raft (OpenMachine: the cluster's meta
// group). Shard is a Group whose state machine is fsm: Submit
// hands a request's operations to the leader's batcher, which gathers the
// operations of concurrent requests into one command, stamps it with the
// leader's clock and proposes it as one log entry, so many checks share one
// entry and one fsync. Every replica applies that command at the same
// stamped time, so all replicas agree exactly.
//
// Host is a node's Raft plumbing: the shared WAL, the transport every
// group speaks over (package raftgrpc), the table of the groups the node
// holds, and who leads each shard (its own replicas' view, else hints).
// Its API speaks Peer and Member, so the node above it needs no raft type.
//
// The leader also proposes an empty command (a tick) when a group has been
// idle for a while, so the machine's clock never has to jump far and expired
// state keeps being swept.
package shard
