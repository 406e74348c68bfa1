package raftgrpc

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// FuzzDecodeAppendEntries feeds arbitrary bytes, as a peer's AppendEntries
// would arrive, through the protobuf decoder and decodeAppendEntriesRequest:
// nothing panics, only an entry type beyond raft.LogType is refused, every
// field lands where it belongs, and it survives encode and decode unchanged.
func FuzzDecodeAppendEntries(f *testing.F) {
	seed := encodeAppendEntriesRequest("shard-0", &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1"), Addr: []byte("127.0.0.1:1")},
		Term:      7, PrevLogEntry: 41, PrevLogTerm: 6, LeaderCommitIndex: 40,
		Entries: []*raft.Log{
			{Index: 42, Term: 7, Type: raft.LogCommand, Data: []byte("cmd"), AppendedAt: time.Unix(1700000000, 5)},
			{Index: 43, Term: 7, Type: raft.LogConfiguration, Extensions: []byte{1}},
		},
	})
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m quoratev1.AppendEntriesRequest
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		req, err := decodeAppendEntriesRequest(&m)
		if err != nil {
			for _, e := range m.GetEntries() {
				if e.GetType() > 255 {
					return
				}
			}
			t.Fatalf("refused %v: %v", &m, err)
		}
		if req.Term != m.GetTerm() || req.PrevLogEntry != m.GetPrevLogEntry() || req.PrevLogTerm != m.GetPrevLogTerm() ||
			req.LeaderCommitIndex != m.GetLeaderCommitIndex() || len(req.Entries) != len(m.GetEntries()) {
			t.Fatalf("decoded %+v from %v", req, &m)
		}
		for i, e := range req.Entries {
			w := m.GetEntries()[i]
			if e.Index != w.GetIndex() || e.Term != w.GetTerm() || uint32(e.Type) != w.GetType() || !bytes.Equal(e.Data, w.GetData()) ||
				!bytes.Equal(e.Extensions, w.GetExtensions()) || (w.GetAppendedAt() != nil && !e.AppendedAt.Equal(w.GetAppendedAt().AsTime())) {
				t.Fatalf("entry %d decoded %+v from %v", i, e, w)
			}
		}
		// And back: what raft hands the transport is sent as it was.
		again, err := decodeAppendEntriesRequest(encodeAppendEntriesRequest(m.GetGroup(), req))
		if err != nil || !reflect.DeepEqual(again.Entries, req.Entries) || again.Term != req.Term {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, req)
		}
	})
}

// FuzzDecodeInstallSnapshot does the same for InstallSnapshot requests and
// the heartbeat, the other messages a peer sends that carry more than
// numbers.
func FuzzDecodeInstallSnapshot(f *testing.F) {
	seed := encodeInstallSnapshotRequest("shard-0", &raft.InstallSnapshotRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1")}, SnapshotVersion: 1, Term: 3,
		LastLogIndex: 9, LastLogTerm: 2, Configuration: []byte("cfg"), ConfigurationIndex: 4, Size: 100,
	})
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	hb, err := proto.Marshal(&quoratev1.Heartbeat{Group: "shard-0", Term: 3, ServerId: []byte("n1"), Leader: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hb)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m quoratev1.InstallSnapshotRequest
		if proto.Unmarshal(b, &m) == nil {
			if req, err := decodeInstallSnapshotRequest(&m); err == nil && req.LastLogIndex != m.GetLastLogIndex() {
				t.Fatalf("last index %d, want %d", req.LastLogIndex, m.GetLastLogIndex())
			}
		}
		var h quoratev1.Heartbeat
		if proto.Unmarshal(b, &h) == nil {
			if req := decodeHeartbeat([]byte("a"), &h); req.Term != h.GetTerm() {
				t.Fatalf("heartbeat term %d, want %d", req.Term, h.GetTerm())
			}
		}
	})
}
