package meta

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
)

// The formats below are what old data directories hold (cluster.json, the
// meta group's log and snapshots) and what nodes of another version send
// (a join's answer, a record served to a peer, the bootstrap digest). They
// were written by package cluster before the state machine moved here; a
// change to any of them breaks upgrades.
const (
	goldenRecord    = `{"version":1,"epoch":7,"shards":3,"replicas":2,"nodes":[{"id":"n1","rpc":"r1","peer":"p1","http":"h1","gossip":"g1"},{"id":"n2","rpc":"r2","peer":"p2","http":"","gossip":"","state":"leaving","incarnation":"i2"}],"placement":[["n1","n2"],["n2","n1"],["n1","n2"]],"moves":[{"shard":0,"add":"n1","remove":"n2"}],"bounds":[{"lo":0,"shard":0},{"lo":9223372036854775808,"shard":1}],"splits":[{"parent":1,"child":2,"at":13835058055282163712}]}`
	goldenDigest    = "665c586f1bd47975"
	goldenNewDigest = "e701425252b84982"
	goldenCommand   = `{"op":"split-start","now":5,"prune":true,"ids":["x"],"block":{"block_id":"b","scope":{"ip":"1"},"expires_at":"2026-12-02T01:00:00Z"},"who":"w","node":{"id":"n2","rpc":"r2","peer":"p2","http":"","gossip":"","state":"leaving","incarnation":"i2"},"id":"n2","move":{"shard":0,"add":"n1","remove":"n2"},"splits":[{"parent":1,"child":2,"at":13835058055282163712}]}`
	goldenResult    = `{"version":3,"changes":{"Added":["a"],"Changed":null,"Removed":null,"Unchanged":null},"diff":"d","err":"e","code":2,"record":{"version":1,"epoch":7,"shards":3,"replicas":2,"nodes":[{"id":"n1","rpc":"r1","peer":"p1","http":"h1","gossip":"g1"},{"id":"n2","rpc":"r2","peer":"p2","http":"","gossip":"","state":"leaving","incarnation":"i2"}],"placement":[["n1","n2"],["n2","n1"],["n1","n2"]],"moves":[{"shard":0,"add":"n1","remove":"n2"}],"bounds":[{"lo":0,"shard":0},{"lo":9223372036854775808,"shard":1}],"splits":[{"parent":1,"child":2,"at":13835058055282163712}]}}`
	goldenSnapshot  = `{"record":{"version":1,"epoch":1,"shards":1,"replicas":1,"nodes":[{"id":"a","rpc":"ra","peer":"pa","http":"","gossip":""},{"id":"b","rpc":"rb","peer":"pb","http":"","gossip":""}],"placement":[["a"]]},"policy":{"version":2,"policies":[{"policy_id":"a","key":["ip"],"algorithm":"TOKEN_BUCKET","config":{"rate":"10/s"},"updated_at":"2026-12-02T00:00:00Z"}],"blocks":[{"block_id":"block-1796169600000000001","scope":{"ip":"203.0.113.8"},"expires_at":"2026-12-02T01:00:00Z"}]}}`
	// goldenHistory is the policy history the old log makes: a field
	// after the old ones, which old snapshots lack and old versions ignore.
	goldenHistory = `"history":{"entries":[{"version":1,"at":1796169600000000000,"op":"apply","added":{"count":1,"ids":["a"]}},{"version":2,"at":1796169600000000001,"op":"block","blocks":["block-1796169600000000001"]}]}`
)

// goldenLog is a meta log as an older quorate wrote it (the record entry
// comes first, from NewRecord).
var goldenLog = []string{
	`{"op":"apply","now":1796169600000000000,"policies":[{"policy_id":"a","key":["ip"],"algorithm":"TOKEN_BUCKET","config":{"rate":"10/s"}}]}`,
	`{"op":"block","now":1796169600000000001,"block":{"block_id":"","scope":{"ip":"203.0.113.8"},"expires_at":"2026-12-02T01:00:00Z"}}`,
	`{"op":"join","node":{"id":"b","rpc":"rb","peer":"pb","http":"","gossip":""}}`,
}

func goldenRec() *Record {
	return &Record{Version: 1, Epoch: 7, Shards: 3, Replicas: 2,
		Nodes:     []NodeInfo{{ID: "n1", RPC: "r1", Peer: "p1", HTTP: "h1", Gossip: "g1"}, {ID: "n2", RPC: "r2", Peer: "p2", State: StateLeaving, Incarnation: "i2"}},
		Placement: [][]string{{"n1", "n2"}, {"n2", "n1"}, {"n1", "n2"}},
		Moves:     []Move{{Shard: 0, Add: "n1", Remove: "n2"}},
		Bounds:    []ring.Bound{{Lo: 0, Shard: 0}, {Lo: 1 << 63, Shard: 1}},
		Splits:    []Split{{Parent: 1, Child: 2, At: 1<<63 + 1<<62}},
	}
}

func TestFormatsUnchanged(t *testing.T) {
	rec := goldenRec()
	if b, _ := json.Marshal(rec); string(b) != goldenRecord {
		t.Errorf("record:\n%s\nwant\n%s", b, goldenRecord)
	}
	var back Record
	if err := json.Unmarshal([]byte(goldenRecord), &back); err != nil || back.Digest() != goldenDigest {
		t.Errorf("the old record reads back with digest %s (%v), want %s", back.Digest(), err, goldenDigest)
	}
	nr := NewRecord([]NodeInfo{{ID: "c", Peer: "pc"}, {ID: "a", Peer: "pa"}, {ID: "b", Peer: "pb"}}, 4, 2)
	if d := nr.Digest(); d != goldenNewDigest {
		t.Errorf("NewRecord's digest %s, want %s: nodes of two versions would not bootstrap together", d, goldenNewDigest)
	}
	exp := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	c := Command{Op: OpSplitStart, Now: 5, Prune: true, IDs: []string{"x"}, Block: &policy.Block{ID: "b", Scope: map[string]string{"ip": "1"}, ExpiresAt: exp},
		Who: "w", Node: &rec.Nodes[1], ID: "n2", Move: &rec.Moves[0], Splits: rec.Splits}
	if b, _ := json.Marshal(c); string(b) != goldenCommand {
		t.Errorf("command:\n%s\nwant\n%s", b, goldenCommand)
	}
	r := Result{Version: 3, Changes: policy.Changes{Added: []string{"a"}}, Diff: "d", Err: "e", Code: CodeNotFound, Record: rec}
	if b, _ := json.Marshal(r); string(b) != goldenResult {
		t.Errorf("result:\n%s\nwant\n%s", b, goldenResult)
	}

	var f FSM
	rb, _ := json.Marshal(NewRecord([]NodeInfo{{ID: "a", Peer: "pa", RPC: "ra"}}, 1, 1))
	f.Apply(rb)
	for _, e := range goldenLog {
		if res, ok := f.Apply([]byte(e)).(Result); !ok || res.Err != "" {
			t.Fatalf("old entry %s: %+v", e, res)
		}
	}
	// The old fields byte for byte, then the history.
	snap, err := f.Snapshot()
	if want := strings.TrimSuffix(goldenSnapshot, "}") + "," + goldenHistory + "}"; err != nil || string(snap) != want {
		t.Errorf("snapshot after the old log (%v):\n%s\nwant\n%s", err, snap, want)
	}
	var g FSM
	if err := g.Restore([]byte(goldenSnapshot)); err != nil || g.Policies().Version != 2 || len(g.Record().Nodes) != 2 {
		t.Errorf("the old snapshot restores to %+v, %+v (%v)", g.Record(), g.Policies(), err)
	}
}
