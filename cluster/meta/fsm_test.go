package meta

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
)

func mustParse(t *testing.T, doc string) []policy.Policy {
	t.Helper()
	ps, err := policy.Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func applyMeta(t *testing.T, f *FSM, c Command) Result {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := f.Apply(b).(Result)
	if !ok {
		t.Fatalf("apply %s: not a Result", b)
	}
	return res
}

const metaDoc = `policies:
  - policy_id: a
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    algorithm: TOKEN_BUCKET
    config: { rate: 10/s }
  - policy_id: b
    key: [ip]
    algorithm: FIXED_WINDOW
    config: { limit: 100/min }
`

// TestMetaPolicyVersions: each change that changes something bumps the
// version and hands the new snapshot over; a refused one or a no-op keeps
// the version and the set.
func TestMetaPolicyVersions(t *testing.T) {
	var swaps []uint64
	f := &FSM{OnPolicies: func(s *policy.Snapshot, _ int64) { swaps = append(swaps, s.Version()) }}
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano()
	res := applyMeta(t, f, Command{Op: OpApply, Now: now, Policies: mustParse(t, metaDoc)})
	if res.Err != "" || res.Version != 1 || len(res.Changes.Added) != 2 {
		t.Fatalf("first apply: %+v", res)
	}
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 1, Policies: mustParse(t, metaDoc)}); res.Version != 1 || len(res.Changes.Unchanged) != 2 {
		t.Fatalf("same set again: %+v; want version 1, nothing changed", res)
	}
	clash := strings.Replace(metaDoc[strings.Index(metaDoc, "  - policy_id: b"):], "policy_id: b", "policy_id: c", 1)
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 2, Policies: mustParse(t, "policies:\n"+clash)}); res.Code != CodeInvalid || res.Version != 1 || !strings.Contains(res.Err, "policy b") {
		t.Fatalf("adding c, which clashes with b: %+v; want refused naming b, version 1", res)
	}
	c := strings.Replace(clash, "key: [ip]", "key: [user_id]", 1)
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 2, Policies: mustParse(t, "policies:\n"+c)}); res.Err != "" || res.Version != 2 {
		t.Fatalf("adding c: %+v", res)
	}
	if res = applyMeta(t, f, Command{Op: OpDelete, Now: now + 3, IDs: []string{"nope"}}); res.Code != CodeNotFound || res.Version != 2 {
		t.Fatalf("deleting an unknown id: %+v; want NotFound at version 2", res)
	}
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 4, Prune: true, Policies: mustParse(t, metaDoc)[:1]}); res.Version != 3 || len(res.Changes.Removed) != 2 {
		t.Fatalf("prune to a: %+v", res)
	}
	if got := f.Policies(); got.Version != 3 || len(got.Policies) != 1 || got.Policies[0].ID != "a" {
		t.Fatalf("state after prune: %+v", got)
	}
	if len(swaps) != 3 || swaps[2] != 3 {
		t.Errorf("snapshots handed over: %v; want versions 1, 2, 3", swaps)
	}
}

// TestMetaBlocksExpireAtLogTime: a block is dropped by the first command
// at or after its expiry, on the log's time, not a clock.
func TestMetaBlocksExpireAtLogTime(t *testing.T) {
	f := &FSM{}
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	b := policy.Block{Scope: map[string]string{"ip": "203.0.113.8"}, ExpiresAt: t0.Add(time.Minute)}
	res := applyMeta(t, f, Command{Op: OpBlock, Now: t0.UnixNano(), Block: &b})
	if res.Err != "" || res.Block == nil || res.Block.ID == "" {
		t.Fatalf("block: %+v", res)
	}
	if n := len(f.Policies().Blocks); n != 1 {
		t.Fatalf("%d blocks; want 1", n)
	}
	applyMeta(t, f, Command{Op: OpApply, Now: t0.Add(2 * time.Minute).UnixNano(), Policies: mustParse(t, metaDoc)})
	if n := len(f.Policies().Blocks); n != 0 {
		t.Errorf("%d blocks after the log passed the expiry; want 0", n)
	}
	if res := applyMeta(t, f, Command{Op: OpUnblock, Now: t0.Add(3 * time.Minute).UnixNano(), IDs: []string{res.Block.ID}}); res.Code != CodeNotFound {
		t.Errorf("unblocking an expired block: %+v; want NotFound", res)
	}
}

// TestMetaSnapshotRoundTrip: the snapshot restores the record, the set and
// its version, and a snapshot of the old format (the record alone) restores.
func TestMetaSnapshotRoundTrip(t *testing.T) {
	f := &FSM{}
	rec := &Record{Version: 1, Shards: 1, Replicas: 1, Nodes: []NodeInfo{{ID: "n1", Peer: "p"}}, Placement: [][]string{{"n1"}}}
	rb, _ := json.Marshal(rec)
	f.Apply(rb)
	applyMeta(t, f, Command{Op: OpApply, Now: 1, Policies: mustParse(t, metaDoc)})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var got *policy.Snapshot
	g := &FSM{OnPolicies: func(s *policy.Snapshot, _ int64) { got = s }}
	if err := g.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if g.Record() == nil || g.Record().Shards != 1 || g.Policies().Version != 1 || got == nil || got.Len() != 2 || got.Version() != 1 {
		t.Fatalf("restored: record %+v, state %+v, snapshot %v", g.Record(), g.Policies(), got)
	}
	old := &FSM{}
	if err := old.Restore(rb); err != nil || old.Record() == nil || old.Record().Shards != 1 {
		t.Fatalf("old-format snapshot: %v %+v", err, old.Record())
	}
}
