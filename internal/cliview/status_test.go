package cliview

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func TestStatus(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	resp := &pb.StatusResponse{
		NodeId: "n2", PolicyVersion: 7, Policies: 12, Blocks: 1, UnderReplicated: []uint32{1, 2},
		Nodes: []*pb.NodeStatus{
			{Id: "n1", RpcAddr: "127.0.0.1:7401", HttpAddr: "127.0.0.1:7501", State: pb.NodeState_NODE_STATE_ALIVE},
			{Id: "n2", RpcAddr: "127.0.0.1:7402", HttpAddr: "127.0.0.1:7502", State: pb.NodeState_NODE_STATE_SUSPECT},
			{Id: "n3", State: pb.NodeState_NODE_STATE_DEAD},
		},
		Shards: []*pb.ShardStatus{
			{Id: 0, LeaderId: "n1", Replicas: []string{"n1", "n2", "n3"}, Term: 3, AppliedIndex: 120, LastContact: timestamppb.New(now.Add(-42 * time.Millisecond))},
			{Id: 1, Replicas: []string{"n2"}, Term: 1},
			// The node's clock is ahead of ours: not "-5s ago".
			{Id: 2, LeaderId: "n2", Replicas: []string{"n2"}, Term: 7, AppliedIndex: 9, LastContact: timestamppb.New(now.Add(5 * time.Second))},
		},
	}
	var b strings.Builder
	Status(&b, resp, now)
	want := `answered by n2
policies: version 7, 12 policies, 1 emergency blocks
under-replicated shards (a replica on a node that is not alive): 1, 2

NODE  RPC             HTTP            STATE    MEMBERSHIP
n1    127.0.0.1:7401  127.0.0.1:7501  alive    -
n2    127.0.0.1:7402  127.0.0.1:7502  suspect  -
n3    -               -               dead     -

SHARD  LEADER  REPLICAS  TERM  APPLIED  LAST CONTACT
0      n1      n1,n2,n3  3     120      42ms ago
1      (none)  n2        1     0        never
2      n2      n2        7     9        0s ago
`
	if b.String() != want {
		t.Errorf("Status:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestStatusMembership: the cluster record's epoch and replication
// factor, each node's membership, and the moves in progress.
func TestStatusMembership(t *testing.T) {
	resp := &pb.StatusResponse{
		NodeId: "n1", PolicyVersion: 3, Epoch: 17, Replicas: 3,
		Nodes: []*pb.NodeStatus{
			{Id: "n1", RpcAddr: "127.0.0.1:7401", State: pb.NodeState_NODE_STATE_ALIVE, Membership: "active"},
			{Id: "n4", RpcAddr: "127.0.0.1:7404", State: pb.NodeState_NODE_STATE_ALIVE, Membership: "leaving"},
			{Id: "n5", RpcAddr: "127.0.0.1:7405", State: pb.NodeState_NODE_STATE_ALIVE},
		},
		Moves: []*pb.MoveStatus{
			{Shard: 3, Add: "n5", Remove: "n4"},
			{Shard: 5, Add: "n5"},
			{Shard: 8, Remove: "n4"},
		},
	}
	var b strings.Builder
	Status(&b, resp, time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	want := `answered by n1
cluster record: epoch 17, replication factor 3
policies: version 3, 0 policies, 0 emergency blocks

NODE  RPC             HTTP  STATE  MEMBERSHIP
n1    127.0.0.1:7401  -     alive  active
n4    127.0.0.1:7404  -     alive  leaving
n5    127.0.0.1:7405  -     alive  -

moves in progress:
  shard 3: n5 joins, n4 leaves
  shard 5: n5 joins
  shard 8: n4 leaves

no shards hosted on this node
`
	if b.String() != want {
		t.Errorf("Status:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestStatusSplits(t *testing.T) {
	var b strings.Builder
	Status(&b, &pb.StatusResponse{
		NodeId: "n1", ShardCount: 3,
		Splits: []*pb.SplitStatus{{Parent: 1, Child: 2, At: 0xc000000000000000}},
		Ranges: []*pb.ShardRange{{Shard: 0, Lo: 0, Hi: 0x7fffffffffffffff}, {Shard: 1, Lo: 0x8000000000000000, Hi: 0xffffffffffffffff}},
	}, time.Now())
	for _, s := range []string{
		"splits in progress:\n  shard 1 into 2: shard 2 takes the hashes from 0xc000000000000000 up\n",
		"shard ranges (3 shards, after splits):\n  shard 0: 0x0000000000000000-0x7fffffffffffffff\n  shard 1: 0x8000000000000000-0xffffffffffffffff\n",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("status does not contain %q:\n%s", s, b.String())
		}
	}
}

func TestTop(t *testing.T) {
	var b strings.Builder
	Top(&b, &pb.TopKeysResponse{Keys: []*pb.TopKey{{Policy: "plan_free", Key: "t_44", Count: 120, Error: 3}, {Policy: "ip_safety", Count: 7}},
		Unreachable: []string{"n3"}}, "hits")
	want := `POLICY     KEY   HITS  ERROR
plan_free  t_44  120   ±3
ip_safety  -     7     ±0
node n3 did not answer: its counts are missing
`
	if b.String() != want {
		t.Errorf("Top:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	Top(&b, &pb.TopKeysResponse{}, "denied")
	if want := "POLICY  KEY  DENIED  ERROR\n(no keys in the window)\n"; b.String() != want {
		t.Errorf("Top, no keys: %q; want %q", b.String(), want)
	}
}

func TestTopJSON(t *testing.T) {
	var b strings.Builder
	if err := TopJSON(&b, &pb.TopKeysResponse{}); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"keys\": [],\n  \"unreachable\": []\n}\n"; b.String() != want {
		t.Errorf("TopJSON, nothing: %q; want %q", b.String(), want)
	}
	b.Reset()
	if err := TopJSON(&b, &pb.TopKeysResponse{Keys: []*pb.TopKey{{Policy: "p", Key: "k", Count: 2, Error: 1}}}); err != nil {
		t.Fatal(err)
	}
	if want := `"keys": [
    {
      "policy": "p",
      "key": "k",
      "count": 2,
      "error": 1
    }
  ]`; !strings.Contains(b.String(), want) {
		t.Errorf("TopJSON:\n%s\nwant it to contain:\n%s", b.String(), want)
	}
}

func TestDecisionLine(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890e6, time.UTC)
	line := `{"time":"2026-03-04T05:06:07.89Z","node":"n1","decision":"DENY","reason":"OVER_LIMIT","policy":"plan_free",` +
		`"descriptors":{"tenant_id":"t_44","ip":"203.0.113.8"},"mode":"leased","request_id":"r1","sample_rate":1}` + "\n"
	want := at.Local().Format("15:04:05.000") + " n1   DENY  OVER_LIMIT         policy=plan_free tenant=t_44 ip=203.0.113.8 mode=leased request_id=r1"
	if got := DecisionLine([]byte(line)); got != want {
		t.Errorf("DecisionLine:\n%q\nwant\n%q", got, want)
	}
	throttled := `{"time":"2026-03-04T05:06:07.89Z","node":"n3","decision":"THROTTLE","delay_ms":250,"reason":"THROTTLED","policy":"shaped","sample_rate":1}`
	if got := DecisionLine([]byte(throttled)); !strings.HasSuffix(got, " n3   THROTTLE THROTTLED          delay=250ms policy=shaped") {
		t.Errorf("DecisionLine, a THROTTLE: %q", got)
	}
	sampled := `{"time":"2026-03-04T05:06:07.89Z","node":"n2","decision":"ALLOW","reason":"WITHIN_LIMIT","sample_rate":0.1}`
	if got := DecisionLine([]byte(sampled)); !strings.HasSuffix(got, " n2   ALLOW WITHIN_LIMIT       (1 in 10 allows)") {
		t.Errorf("DecisionLine, a sampled allow: %q", got)
	}
	if got := DecisionLine([]byte("not json \n")); got != "not json" {
		t.Errorf("DecisionLine, not a record: %q", got)
	}
}

// TestTail: lines as they are or for a person, and nothing after Max.
func TestTail(t *testing.T) {
	var b strings.Builder
	var done atomic.Int32
	tail := &Tail{W: &b, JSON: true, Max: 2, Done: func() { done.Add(1) }}
	for _, l := range []string{"{\"a\":1}\n", "{\"a\":2}\n", "{\"a\":3}\n"} {
		tail.Line([]byte(l))
	}
	tail.Lost("h:1", 4)
	if want := "{\"a\":1}\n{\"a\":2}\n(h:1: 4 lines lost: this tail fell behind)\n"; b.String() != want || done.Load() != 1 {
		t.Errorf("Tail: %q, done %d times; want %q, once", b.String(), done.Load(), want)
	}
	b.Reset()
	tail = &Tail{W: &b}
	tail.Line([]byte("plain\n"))
	if b.String() != "plain\n" {
		t.Errorf("Tail for a person: %q", b.String())
	}
}
