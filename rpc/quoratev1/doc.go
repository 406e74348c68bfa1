// Package quoratev1 is quorate's wire API, version 1: the protobuf messages
// and gRPC services generated from the .proto files in this directory.
//
//   - ratelimiter.proto: RateLimiter, the public Check API.
//   - admin.proto: Admin, cluster and shard status for operators.
//   - internal.proto: Internal, node-to-node forwarding of batches.
//   - raft.proto: RaftTransport, every Raft group's replication over one port
//     (implemented by package rpc/raftgrpc).
//
// The .proto files are the source of truth and their comments are the API
// documentation. The *.pb.go files are generated and committed; regenerate
// them with scripts/proto.sh (make proto) after editing a .proto file.
package quoratev1
