package main

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func TestRemove(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "remove", "--plaintext", "--addr", addr, "--node", "n3")
	expectRun(t, r, 0, []string{"node n3 removed (record epoch 9): its replicas are moving"}, nil)
	if req, ok := f.lastRequest().(*pb.RemoveNodeRequest); !ok || req.GetNodeId() != "n3" {
		t.Errorf("the node got %v; want a RemoveNodeRequest for n3", f.lastRequest())
	}
}

func TestRemoveRefused(t *testing.T) {
	const msg = `remove: node "n3" is alive; stop it first (to take a live node out, use quorate leave)`
	f := &fakeAdmin{err: status.Error(codes.FailedPrecondition, msg)}
	addr := startFakeNode(t, f)
	r := runCLI(t, "remove", "--plaintext", "--addr", addr, "--node", "n3")
	expectRun(t, r, 1, nil, []string{"quorate: FailedPrecondition: " + msg + "\n"})
}

func TestRemoveUsage(t *testing.T) {
	r := runCLI(t, "remove", "--plaintext")
	expectRun(t, r, 2, nil, []string{"--node: give the id of the node to replace"})
}
