package api

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/telemetry"
	"github.com/quorate/quorate/telemetry/topk"
)

func summary(t *testing.T, policy string, counts map[string]int64) topk.Summary {
	t.Helper()
	s, err := topk.NewSketch(16)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range counts {
		s.Add(k, n)
	}
	sum := s.Summary()
	sum.Policy, sum.By, sum.Window = policy, topk.Denied, defaultTopWindow
	return sum
}

// TestMergedTop: the nodes' summaries of one policy add up per key, each
// policy keeps its n most, keys read as operators write them, and a node
// that did not answer is named.
func TestMergedTop(t *testing.T) {
	reports := []telemetry.Report{
		{Node: "n1", Top: []topk.Summary{summary(t, "p", map[string]int64{"t1\x1f/a": 5, "t2\x1f/a": 1})}},
		{Node: "n2", Top: []topk.Summary{summary(t, "p", map[string]int64{"t1\x1f/a": 4, "t3\x1f/a": 3}), summary(t, "q", map[string]int64{"x": 2})}},
		{Node: "n3", Error: "down (gossip)"},
	}
	keys, unreachable := mergedTop(reports, 2)
	want := []struct {
		policy, key string
		count       uint64
	}{{"p", "t1//a", 9}, {"p", "t3//a", 3}, {"q", "x", 2}}
	if len(keys) != len(want) {
		t.Fatalf("keys %+v, want %v", keys, want)
	}
	for i, w := range want {
		if keys[i].Policy != w.policy || keys[i].Key != w.key || keys[i].Count != w.count || keys[i].Err != 0 {
			t.Errorf("key %d: %+v, want %v", i, keys[i], w)
		}
	}
	if len(unreachable) != 1 || unreachable[0] != "n3" {
		t.Errorf("unreachable %v, want [n3]", unreachable)
	}
}

// TestTopQueryBadInput: a bad TopKeys request is InvalidArgument naming
// the field.
func TestTopQueryBadInput(t *testing.T) {
	for _, tt := range []struct {
		req   *pb.TopKeysRequest
		field string
	}{
		{&pb.TopKeysRequest{By: "most"}, "by"},
		{&pb.TopKeysRequest{Window: durationpb.New(2 * time.Minute)}, "window"},
		{&pb.TopKeysRequest{Limit: maxTopLimit + 1}, "limit"},
	} {
		_, err := topQuery(tt.req)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || len(st.Message()) < len(tt.field) || st.Message()[:len(tt.field)] != tt.field {
			t.Errorf("%v: %v, want InvalidArgument naming %s", tt.req, err, tt.field)
		}
	}
	q, err := topQuery(&pb.TopKeysRequest{Policy: "p", By: "hits", Window: durationpb.New(time.Hour), Limit: 5})
	if err != nil || q != (telemetry.TopQuery{Policy: "p", By: "hits", Window: time.Hour, Limit: 5}) {
		t.Errorf("good query: %+v %v", q, err)
	}
}
