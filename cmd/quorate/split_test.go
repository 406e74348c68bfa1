package main

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func (f *fakeAdmin) SplitShards(_ context.Context, req *pb.SplitShardsRequest) (*pb.SplitShardsResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	resp := &pb.SplitShardsResponse{Epoch: 12}
	for i, s := range req.GetShards() {
		resp.Splits = append(resp.Splits, &pb.SplitShardsResponse_Split{Parent: s, Child: uint32(8 + i), At: 0xc000000000000000})
	}
	return resp, nil
}

func TestSplit(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "split", "--plaintext", "--addr", addr, "--shard", "3", "--shard", "5")
	expectRun(t, r, 0, []string{
		"shard 3 splits at 0xc000000000000000: shard 8 takes the keys from there up\n",
		"shard 5 splits at 0xc000000000000000: shard 9 takes",
		"2 split(s) recorded (record epoch 12)",
	}, nil)
	if req, ok := f.lastRequest().(*pb.SplitShardsRequest); !ok || !slices.Equal(req.GetShards(), []uint32{3, 5}) || req.GetAll() {
		t.Errorf("the node got %v; want a SplitShardsRequest for shards 3 and 5", f.lastRequest())
	}
	r = runCLI(t, "split", "--plaintext", "--addr", addr, "--all")
	expectRun(t, r, 0, []string{"0 split(s) recorded"}, nil)
	if req, ok := f.lastRequest().(*pb.SplitShardsRequest); !ok || !req.GetAll() {
		t.Errorf("the node got %v; want a SplitShardsRequest with all", f.lastRequest())
	}
}

func TestSplitRefused(t *testing.T) {
	const msg = "split-start: shard 3 is splitting already"
	addr := startFakeNode(t, &fakeAdmin{err: status.Error(codes.FailedPrecondition, msg)})
	r := runCLI(t, "split", "--plaintext", "--addr", addr, "--shard", "3")
	expectRun(t, r, 1, nil, []string{"quorate: FailedPrecondition: " + msg + "\n"})
}

func TestSplitUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--shard: name a shard to split"},
		{[]string{"--all", "--shard", "1"}, "--shard, --all: give one or the other"},
		{[]string{"--shard", "1", "--shard", "2", "--at", "5"}, "--at: only with a single --shard"},
		{[]string{"--shard", "x"}, "--shard"},
		{[]string{"--shard", "4294967296"}, "--shard: 4294967296 is not a shard"},
	} {
		r := runCLI(t, append([]string{"split", "--plaintext"}, c.args...)...)
		expectRun(t, r, 2, nil, []string{c.want})
	}
}
