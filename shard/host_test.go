package shard

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
)

// TestHost runs a one-node host for real (a WAL on disk, the gRPC
// transport on loopback): its groups open and elect, their leaders reach
// OnLeader and Leader, a hint names the leader of a shard it does not
// hold, the meta group's configuration reads back without raft types, a
// dropped shard's state is gone, and Close ends the groups.
func TestHost(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	dir := t.TempDir()
	var mu sync.Mutex
	leaders := map[string]string{}
	h := NewHost(HostConfig{
		NodeID: "n1", Addr: addr, DataDir: dir,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		OnLeader: func(group string, s int, leader string) {
			mu.Lock()
			leaders[group] = leader
			mu.Unlock()
		},
	})
	srv := grpc.NewServer()
	h.Serve(srv, nil)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	if err := h.Open(); err != nil {
		t.Fatal(err)
	}
	self := []Peer{{ID: "n1", Addr: addr}}
	m := &listMachine{}
	mg, err := h.OpenMeta(m, self)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := h.OpenShard(2, self)
	if err != nil {
		t.Fatal(err)
	}
	led := func(group string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return leaders[group] == "n1"
		}
	}
	await.True(t, 10*time.Second, "the meta group's leader reported", led(MetaGroup))
	await.True(t, 10*time.Second, "shard 2's leader reported", led(ShardGroup(2)))
	if got := h.Leader(2); got != "n1" {
		t.Errorf("Leader(2) = %q, want n1", got)
	}
	if h.Shard(1) != nil || h.Shard(2) != sh || h.Named("shard-2") != sh || h.Group(MetaGroup) != mg {
		t.Error("the group table does not hold what was opened")
	}
	h.Hint(5, "n3")
	if got := h.Leader(5); got != "n3" {
		t.Errorf("Leader(5) after a hint = %q, want n3", got)
	}
	h.Hint(7, "n1") // a hint naming this node, which holds no replica of 7
	if got := h.Leader(7); got != "" {
		t.Errorf("Leader(7) = %q, want none", got)
	}

	if resp, err := mg.Apply([]byte("a"), 5*time.Second); err != nil || resp != 1 {
		t.Fatalf("meta apply: %v %v", resp, err)
	}
	members, _, err := mg.Members()
	if err != nil || len(members) != 1 || members[0].Peer != self[0] || !members[0].Voter {
		t.Fatalf("members %+v %v", members, err)
	}
	take := fsm.Op{Kind: fsm.OpTake, Key: "api\x00k", Limit: fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Minute}, Cost: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if a, err := sh.Submit(ctx, []fsm.Op{take}, false); err != nil || !a.Results[0].Allowed {
		t.Fatalf("submit: %+v %v", a, err)
	}

	h.DropShard(2)
	if h.Shard(2) != nil {
		t.Error("a dropped shard is still in the table")
	}
	if _, err := os.Stat(filepath.Join(dir, "shards", "shard-2")); !os.IsNotExist(err) {
		t.Errorf("a dropped shard's directory: %v, want it gone", err)
	}
	if last, _ := h.wal.Log("shard-2").LastIndex(); last != 0 {
		t.Errorf("a dropped shard's log ends at %d, want empty", last)
	}
	h.Close()
	if mg.IsLeader() {
		t.Error("the meta group still leads after Close")
	}
}
