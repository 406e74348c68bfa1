package meta

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/quorate/quorate/policy/extract"
)

// FuzzMetaFSM feeds arbitrary bytes to the meta group's state machine as a
// log entry and as a snapshot, both of which come from disk or a peer:
// nothing panics, and a restored record snapshots back to itself.
func FuzzMetaFSM(f *testing.F) {
	rec, err := json.Marshal(&Record{Version: 1, Shards: 3, Replicas: 3,
		Nodes: []NodeInfo{{ID: "n1"}}, Placement: [][]string{{"n1"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rec)
	valid, err := json.Marshal(&Record{Version: 1, Shards: 2, Replicas: 1,
		Nodes: []NodeInfo{{ID: "n1", RPC: "a:1", Peer: "a:2"}}, Placement: [][]string{{"n1"}, {"n1"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("null"))
	f.Add([]byte(`{"shards":-1,"placement":[[]]}`))
	f.Add([]byte(`{"op":"move-start","move":{"shard":1,"add":"n2"}}`))
	f.Add([]byte(`{"op":"join","node":{"id":"n2","rpc":"a:1","peer":"a:2"}}`))
	f.Add([]byte(`{"op":"move-done","move":{"shard":7,"remove":"n1"}}`))
	f.Add([]byte(`{"op":"split-start","splits":[{"parent":1,"at":18446744073709551000}]}`))
	f.Add([]byte(`{"op":"split-done","splits":[{"parent":1,"child":2,"at":18446744073709551000}]}`))
	f.Add([]byte(`{"version":1,"shards":3,"replicas":1,"nodes":[{"id":"n1","rpc":"a","peer":"b"}],"placement":[["n1"],["n1"],["n1"]],` +
		`"bounds":[{"lo":0,"shard":0},{"lo":9223372036854775808,"shard":1}],"splits":[{"parent":1,"child":2,"at":18446744073709551000}]}`))
	f.Add([]byte(`{"op":"apply","now":5,"extraction":{"headers":{"tenant_id":"X-Org"},"custom":{"team":"X-Team"},"trusted_proxies":["10.0.0.0/8"]}}`))
	f.Add([]byte(`{"record":null,"policy":{"version":1,"extraction":{"trusted_proxies":["::1"],"client_ip_headers":["X-Real-IP"]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var applied FSM
		applied.Apply(b)
		// The same bytes as a command to a cluster that has a record: a
		// record change must leave a valid record.
		var member FSM
		member.Apply(valid)
		member.Apply(b)
		if r := member.Record(); r != nil && r.Epoch > 0 {
			if err := r.Validate(); err != nil {
				t.Fatalf("%q made an invalid record: %v", b, err)
			}
		}
		var restored FSM
		if restored.Restore(b) != nil {
			return
		}
		snap, err := restored.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var again FSM
		if err := again.Restore(snap); err != nil {
			t.Fatalf("own snapshot %q refused: %v", snap, err)
		}
		if !reflect.DeepEqual(again.Record(), restored.Record()) {
			t.Fatalf("snapshot round trip: %+v, want %+v", again.Record(), restored.Record())
		}
		if a, r := again.Policies(), restored.Policies(); a.Version != r.Version || !extract.Same(a.Extraction, r.Extraction) {
			t.Fatalf("snapshot round trip: policies %+v, want %+v", a, r)
		}
	})
}
