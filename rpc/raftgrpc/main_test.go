package raftgrpc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: raft
// instances, gRPC servers and connections, pipelines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
