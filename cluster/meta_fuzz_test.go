package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzMetaFSM feeds arbitrary bytes to the meta group's state machine as a
// log entry and as a snapshot, both of which come from disk or a peer:
// nothing panics, and a restored record snapshots back to itself.
func FuzzMetaFSM(f *testing.F) {
	rec, err := json.Marshal(&record{Version: 1, Shards: 3, Replicas: 3,
		Nodes: []nodeInfo{{ID: "n1"}}, Placement: [][]string{{"n1"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rec)
	f.Add([]byte("null"))
	f.Add([]byte(`{"shards":-1,"placement":[[]]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var applied metaFSM
		applied.Apply(&raft.Log{Data: b})
		var restored metaFSM
		if restored.Restore(io.NopCloser(bytes.NewReader(b))) != nil {
			return
		}
		snap, err := restored.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var again metaFSM
		if err := again.Restore(io.NopCloser(bytes.NewReader(snap.(metaSnapshot)))); err != nil {
			t.Fatalf("own snapshot %q refused: %v", snap, err)
		}
		if !reflect.DeepEqual(again.get(), restored.get()) {
			t.Fatalf("snapshot round trip: %+v, want %+v", again.get(), restored.get())
		}
	})
}
