package main

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func TestLeave(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "leave", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"node n1 left the cluster (record epoch 17); it stops by itself\n"},
		[]string{"asking node n1 to leave; waiting up to 10m0s for its replicas to move"})
	if _, ok := f.lastRequest().(*pb.LeaveRequest); !ok {
		t.Errorf("the node got %T; want a LeaveRequest", f.lastRequest())
	}
}

// TestLeaveStatusRefused: a token with only the admin scope may not call
// Status; leave names the node by its address instead.
func TestLeaveStatusRefused(t *testing.T) {
	f := &fakeAdmin{statusErr: status.Error(codes.PermissionDenied, `Admin.Status needs scope check,read; token "ops" has admin`)}
	addr := startFakeNode(t, f)
	r := runCLI(t, "leave", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"node at " + addr + " left the cluster (record epoch 17); it stops by itself\n"}, nil)
}

func TestLeaveRefused(t *testing.T) {
	const msg = "leave: 2 nodes would remain for a replication factor of 3; add a node first"
	f := &fakeAdmin{err: status.Error(codes.FailedPrecondition, msg)}
	addr := startFakeNode(t, f)
	r := runCLI(t, "leave", "--plaintext", "--addr", addr)
	expectRun(t, r, 1, nil, []string{"quorate: FailedPrecondition: " + msg + "\n"})
	if r.stdout != "" {
		t.Errorf("stdout %q; want nothing", r.stdout)
	}
}

func TestLeaveTimeout(t *testing.T) {
	f := &fakeAdmin{leaveWait: true}
	addr := startFakeNode(t, f)
	r := runCLI(t, "leave", "--plaintext", "--addr", addr, "--timeout", "300ms")
	expectRun(t, r, 1, nil, []string{
		"quorate: leave: node n1 had not left within --timeout 300ms; the moves go on without this command",
		`"quorate status --addr ` + addr + `" shows its membership and the moves in progress`,
	})
	if r.stdout != "" {
		t.Errorf("stdout %q; want nothing", r.stdout)
	}
}

func TestLeaveUsage(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		errOut string
	}{
		{[]string{"leave", "--plaintext"}, "quorate: --addr: give the gRPC address of the node that should leave"},
		{[]string{"leave", "--plaintext", "--addr", ""}, "quorate: --addr: give the gRPC address of the node that should leave"},
		{[]string{"leave", "--plaintext", "--addr", "127.0.0.1:1", "--timeout", "0s"}, "quorate: --timeout 0s: must be positive"},
		{[]string{"leave", "--plaintext", "--addr", "127.0.0.1:1", "n4"}, `unknown command "n4"`},
	} {
		r := runCLI(t, tt.args...)
		expectRun(t, r, exitUsage, nil, []string{tt.errOut, "Run 'quorate leave --help' for usage."})
	}
}
