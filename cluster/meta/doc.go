// Package meta is the meta group's replicated state machine: the cluster
// record (nodes, placement, replica moves, splits) with the membership
// commands that change it, the versioned policy set with its emergency
// blocks, and the tenant assignment (which plan each tenant is on).
//
// It is pure, like package fsm: it starts no goroutine, reads no clock (a
// command carries its proposer's time) and does no I/O, and it knows
// nothing of Raft. FSM takes a committed entry's bytes and gives a
// snapshot's bytes; package shard adapts it to a Raft group
// (shard.OpenMachine). The record's JSON, the commands' and the snapshot's
// are what old data directories hold: their field names do not change.
package meta
