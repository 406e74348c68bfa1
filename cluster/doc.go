// Package cluster is a quorate node: its lifecycle, and the record of
// the cluster it follows.
//
// A node finds its peers through gossip (cluster/gossip), bootstraps the
// meta group and the shard groups once with them, or joins a running
// cluster, and from then on follows the record its meta replica applies
// (cluster/meta): it opens and drops replicas (shard.Host), and its meta
// leader moves replicas and splits shards. It decides checks with a
// decide.Engine whose Shards is this node's own replicas and its peers
// (forwarding to a shard's leader, cluster/peer), serves the peer port's
// internal services, and serves on its public port and HTTP port what
// its Frontend (package api) gives it.
//
// The flow of one strict check through a node:
//
//	api (wire -> decide.Request) -> decide.Engine -> Node's Shards.Submit
//	  -> the shard's leader: shard.Shard.Submit here, or peer.Forward there
//	  -> the group's log -> fsm.Machine -> the answer back the same way
package cluster
