//lint:file-ignore SA1019 the round trip must cover raft's deprecated Leader and Candidate fields.

package raftgrpc

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// roundTrip marshals m to bytes and back, so tests see what the wire keeps.
func roundTrip[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("marshal %T: %v", m, err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatalf("unmarshal %T: %v", m, err)
	}
	return out
}

func check(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s round trip:\n got  %+v\n want %+v", what, got, want)
	}
}

func TestConvertRoundTrip(t *testing.T) {
	hdr := raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1"), Addr: []byte("10.0.0.1:7000")}
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

	t.Run("AppendEntriesRequest", func(t *testing.T) {
		want := &raft.AppendEntriesRequest{
			RPCHeader: hdr, Term: 7, Leader: []byte("10.0.0.1:7000"),
			PrevLogEntry: 41, PrevLogTerm: 6, LeaderCommitIndex: 40,
			Entries: []*raft.Log{
				{Index: 42, Term: 7, Type: raft.LogCommand, Data: []byte("op"), Extensions: []byte("ext"), AppendedAt: at},
				{Index: 43, Term: 7, Type: raft.LogConfiguration, Data: []byte("cfg")}, // no time: stays zero
				{Index: 44, Term: 7, Type: raft.LogNoop},
			},
		}
		m := roundTrip(t, encodeAppendEntriesRequest("g1", want))
		if m.GetGroup() != "g1" {
			t.Errorf("group = %q, want g1", m.GetGroup())
		}
		got, err := decodeAppendEntriesRequest(m)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "AppendEntriesRequest", got, want)
	})
	t.Run("AppendEntriesResponse", func(t *testing.T) {
		want := raft.AppendEntriesResponse{RPCHeader: hdr, Term: 7, LastLog: 44, Success: true, NoRetryBackoff: true}
		check(t, "AppendEntriesResponse", decodeAppendEntriesResponse(roundTrip(t, encodeAppendEntriesResponse(&want))), want)
	})
	t.Run("RequestVote", func(t *testing.T) {
		want := &raft.RequestVoteRequest{RPCHeader: hdr, Term: 8, Candidate: []byte("c"), LastLogIndex: 44, LastLogTerm: 7, LeadershipTransfer: true}
		check(t, "RequestVoteRequest", decodeRequestVoteRequest(roundTrip(t, encodeRequestVoteRequest("g", want))), want)
		wantResp := raft.RequestVoteResponse{RPCHeader: hdr, Term: 8, Peers: []byte("p"), Granted: true}
		check(t, "RequestVoteResponse", decodeRequestVoteResponse(roundTrip(t, encodeRequestVoteResponse(&wantResp))), wantResp)
	})
	t.Run("RequestPreVote", func(t *testing.T) {
		want := &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 9, LastLogIndex: 44, LastLogTerm: 7}
		check(t, "RequestPreVoteRequest", decodeRequestPreVoteRequest(roundTrip(t, encodeRequestPreVoteRequest("g", want))), want)
		wantResp := raft.RequestPreVoteResponse{RPCHeader: hdr, Term: 9, Granted: true}
		check(t, "RequestPreVoteResponse", decodeRequestPreVoteResponse(roundTrip(t, encodeRequestPreVoteResponse(&wantResp))), wantResp)
	})
	t.Run("TimeoutNow", func(t *testing.T) {
		want := &raft.TimeoutNowRequest{RPCHeader: hdr}
		check(t, "TimeoutNowRequest", decodeTimeoutNowRequest(roundTrip(t, encodeTimeoutNowRequest("g", want))), want)
		wantResp := raft.TimeoutNowResponse{RPCHeader: hdr}
		check(t, "TimeoutNowResponse", decodeTimeoutNowResponse(roundTrip(t, encodeTimeoutNowResponse(&wantResp))), wantResp)
	})
	t.Run("InstallSnapshot", func(t *testing.T) {
		want := &raft.InstallSnapshotRequest{
			RPCHeader: hdr, SnapshotVersion: 1, Term: 7, Leader: []byte("l"),
			LastLogIndex: 40, LastLogTerm: 6, Peers: []byte("p"),
			Configuration: []byte("cfg"), ConfigurationIndex: 3, Size: 1 << 20,
		}
		got, err := decodeInstallSnapshotRequest(roundTrip(t, encodeInstallSnapshotRequest("g", want)))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "InstallSnapshotRequest", got, want)
		wantResp := raft.InstallSnapshotResponse{RPCHeader: hdr, Term: 7, Success: true}
		check(t, "InstallSnapshotResponse", decodeInstallSnapshotResponse(roundTrip(t, encodeInstallSnapshotResponse(&wantResp))), wantResp)
	})
}

// Values raft's types cannot hold are refused, not truncated.
func TestDecodeRejectsGarbage(t *testing.T) {
	if _, err := decodeAppendEntriesRequest(&quoratev1.AppendEntriesRequest{
		Entries: []*quoratev1.RaftLog{{Index: 1, Type: 256}},
	}); err == nil {
		t.Error("log type 256 decoded without error")
	}
	if _, err := decodeInstallSnapshotRequest(&quoratev1.InstallSnapshotRequest{Size: -1}); err == nil {
		t.Error("negative snapshot size decoded without error")
	}
}

func TestIsHeartbeat(t *testing.T) {
	hb := func(mod func(*raft.AppendEntriesRequest)) *raft.AppendEntriesRequest {
		r := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte("a")}, Term: 3}
		mod(r)
		return r
	}
	for _, tc := range []struct {
		name string
		req  *raft.AppendEntriesRequest
		want bool
	}{
		{"heartbeat", hb(func(*raft.AppendEntriesRequest) {}), true},
		{"legacy leader field", hb(func(r *raft.AppendEntriesRequest) { r.Addr, r.Leader = nil, []byte("a") }), true},
		{"no term", hb(func(r *raft.AppendEntriesRequest) { r.Term = 0 }), false},
		{"no leader", hb(func(r *raft.AppendEntriesRequest) { r.Addr = nil }), false},
		{"entries", hb(func(r *raft.AppendEntriesRequest) { r.Entries = []*raft.Log{{Index: 1}} }), false},
		// A commit index makes it a replication probe, which must go through
		// the main loop.
		{"commit index", hb(func(r *raft.AppendEntriesRequest) { r.LeaderCommitIndex = 1 }), false},
		{"prev entry", hb(func(r *raft.AppendEntriesRequest) { r.PrevLogEntry = 1 }), false},
	} {
		if got := isHeartbeat(tc.req); got != tc.want {
			t.Errorf("%s: isHeartbeat = %v, want %v", tc.name, got, tc.want)
		}
	}
}
