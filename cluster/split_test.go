package cluster

import (
	"fmt"
	"testing"

	"github.com/quorate/quorate/cluster/meta"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func testRecord(nodes, shards, replicas int) *meta.Record {
	var infos []meta.NodeInfo
	for i := range nodes {
		infos = append(infos, meta.NodeInfo{ID: fmt.Sprintf("n%d", i+1), RPC: "r", Peer: "p"})
	}
	return meta.NewRecord(infos, shards, replicas)
}

func TestSplitsFor(t *testing.T) {
	r := testRecord(3, 4, 3)
	sps, err := splitsFor(r, &pb.SplitShardsRequest{All: true})
	if err != nil || len(sps) != 4 {
		t.Fatalf("all: %v %v", sps, err)
	}
	rg, _ := r.Ring()
	for _, sp := range sps {
		lo, hi := rg.Range(sp.Parent)
		if sp.At <= lo || sp.At > hi {
			t.Errorf("shard %d splits at %#x, outside (%#x, %#x]", sp.Parent, sp.At, lo, hi)
		}
	}
	for name, req := range map[string]*pb.SplitShardsRequest{
		"nothing":       {},
		"both":          {All: true, Shards: []uint32{1}},
		"no such shard": {Shards: []uint32{4}},
		"twice":         {Shards: []uint32{1, 1}},
		"at with two":   {Shards: []uint32{1, 2}, At: 5},
		"at outside":    {Shards: []uint32{1}, At: 5},
	} {
		if _, err := splitsFor(r, req); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
