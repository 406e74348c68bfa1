package cliview

import (
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// TestPoliciesInferLayerAndKind: a policy that names no layer or kind is
// listed with the ones the nodes infer.
func TestPoliciesInferLayerAndKind(t *testing.T) {
	resp := &pb.ListPoliciesResponse{Version: 3, Policies: []string{
		`{"policy_id":"anon","scope":{"api_key_id":""},"key":["ip"],"algorithm":"GCRA","config":{"rate":"30/min"}}`,
		`{"policy_id":"t44","scope":{"tenant_id":"t_44"},"key":["tenant_id"],"algorithm":"GCRA","config":{"rate":"30/min"}}`,
	}}
	var b strings.Builder
	if err := Policies(&b, resp); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"anon  IP      FALLBACK", "t44   TENANT  OVERRIDE"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("list:\n%s\nwant a line with %q", b.String(), want)
		}
	}
}

// TestAnswerError: what the node sent that cannot be shown is an
// AnswerError (a command fails on it, as on no other error of a view).
func TestAnswerError(t *testing.T) {
	var b strings.Builder
	for name, err := range map[string]error{
		"PolicyJSON":   PolicyJSON(&b, "{"),
		"PolicyYAML":   PolicyYAML(&b, "{"),
		"PoliciesJSON": PoliciesJSON(&b, &pb.ListPoliciesResponse{Policies: []string{"{"}}),
		"Policies":     Policies(&b, &pb.ListPoliciesResponse{Policies: []string{"{"}}),
		"blocks":       Policies(&b, &pb.ListPoliciesResponse{Blocks: []string{"{"}}),
	} {
		if _, ok := errors.AsType[*AnswerError](err); !ok || !strings.Contains(err.Error(), "that is not JSON") {
			t.Errorf("%s: %v; want an AnswerError", name, err)
		}
	}
}

func TestWaits(t *testing.T) {
	var b strings.Builder
	lag := Waits(&b, []NodeWait{
		{ID: "n1", Live: true, Took: 8 * time.Millisecond},
		{ID: "n2", Answered: true, Version: 6},
		{ID: "n3", Live: true, Took: 1500 * time.Microsecond},
		{ID: "n4", Err: errors.New("refused")},
		{ID: "n5"},
	})
	if want := "live on n1 after 8ms, n3 after 2ms\n"; b.String() != want {
		t.Errorf("Waits wrote %q; want %q", b.String(), want)
	}
	if want := "n2 (at version 6), n4 (refused), n5 (no answer)"; strings.Join(lag, ", ") != want {
		t.Errorf("lagging: %q; want %q", lag, want)
	}
}
