// Package cluster is a quorate node: memberlist gossip, the one-time
// bootstrap of the meta group and the shard groups, hosting this node's
// replicas, routing each check to its shard's leader, and the public gRPC
// and HTTP surfaces.
package cluster
