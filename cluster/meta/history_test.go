package meta

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

var t0 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// at is the command time of step i.
func at(i int) int64 { return t0.Add(time.Duration(i) * time.Second).UnixNano() }

// rated is a token bucket policy id at rate.
func rated(id, rate string) string {
	return fmt.Sprintf("  - policy_id: %s\n    scope: { tenant_id: %s }\n    key: [tenant_id]\n    algorithm: TOKEN_BUCKET\n    config: { rate: %s }\n", id, id, rate)
}

// versions builds a set through every kind of change and returns the FSM
// and the set (policies and extraction) at each version.
func versions(t *testing.T) (*FSM, map[uint64]PolicyState) {
	t.Helper()
	f := &FSM{}
	seen := map[uint64]PolicyState{0: {}}
	step := func(i int, c Command) {
		t.Helper()
		c.Now = at(i)
		if res := applyMeta(t, f, c); res.Err != "" {
			t.Fatalf("step %d (%s): %s", i, c.Op, res.Err)
		}
		st := f.Policies()
		seen[st.Version] = st
	}
	org := &extract.Extraction{Headers: map[string]string{"tenant_id": "X-Org"}}
	step(1, Command{Op: OpApply, Who: "alice", Source: "v1.yaml", Policies: mustParse(t, "policies:\n"+rated("a", "5/s")+rated("b", "10/s"))})
	step(2, Command{Op: OpApply, Who: "bob", Policies: mustParse(t, "policies:\n"+rated("a", "50/s")+rated("c", "1/s"))})
	step(3, Command{Op: OpApply, Who: "alice", Extraction: org})
	step(4, Command{Op: OpDelete, Who: "carol", IDs: []string{"b"}})
	step(5, Command{Op: OpBlock, Who: "dave", Block: &policy.Block{Scope: map[string]string{"ip": "203.0.113.8"}, ExpiresAt: t0.Add(time.Hour)}})
	team := &extract.Extraction{Headers: map[string]string{"tenant_id": "X-Team"}}
	step(6, Command{Op: OpApply, Who: "erin", Prune: true, Extraction: team, Policies: mustParse(t, "policies:\n"+rated("c", "2/s")+rated("d", "3/s"))})
	return f, seen
}

// sameSet reports how two sets differ ("" if they say the same).
func sameSet(a, b PolicyState) string {
	d := policy.Diff(a.Policies, b.Policies) + policy.ExtractionDiff(a.Extraction, b.Extraction)
	if len(a.Policies) != len(b.Policies) && d == "" {
		d = "duplicate ids"
	}
	return d
}

// TestHistoryRecordsVersions: each version is listed with who, when, what
// and from which document; the oldest needs no undo.
func TestHistoryRecordsVersions(t *testing.T) {
	f, _ := versions(t)
	st, h := f.History()
	if st.Version != 6 || len(h.Entries) != 6 || h.FellOff != 0 {
		t.Fatalf("version %d, %d entries, fell off %d; want 6, 6, 0", st.Version, len(h.Entries), h.FellOff)
	}
	want := []struct {
		op, who, source         string
		added, changed, removed []string
		blocks                  int
		extraction              bool
	}{
		{OpApply, "alice", "v1.yaml", []string{"a", "b"}, nil, nil, 0, false},
		{OpApply, "bob", "", []string{"c"}, []string{"a"}, nil, 0, false},
		{OpApply, "alice", "", nil, nil, nil, 0, true},
		{OpDelete, "carol", "", nil, nil, []string{"b"}, 0, false},
		{OpBlock, "dave", "", nil, nil, nil, 1, false},
		{OpApply, "erin", "", []string{"d"}, []string{"c"}, []string{"a"}, 0, true},
	}
	for i, w := range want {
		e := h.Entries[i]
		if e.Version != uint64(i+1) || e.At != at(i+1) || e.Op != w.op || e.Who != w.who || e.Source != w.source ||
			!slices.Equal(e.Added.IDs, w.added) || !slices.Equal(e.Changed.IDs, w.changed) || !slices.Equal(e.Removed.IDs, w.removed) ||
			e.Added.Count != len(w.added) || len(e.Blocks) != w.blocks || e.Extraction != w.extraction {
			t.Errorf("entry %d: %+v; want %+v", i+1, e, w)
		}
	}
	if h.Entries[0].Undo != nil || len(h.Entries[1].Undo) != 2 {
		t.Errorf("undo: oldest %v (want none), version 2 %v (want a's old body and c added)", h.Entries[0].Undo, h.Entries[1].Undo)
	}
}

// TestRollbackRebuildsEveryVersion: from the last version, a rollback to
// each kept version makes the set equal to that version's, policies and
// extraction, and is itself a new version; the diff between any two
// versions is the diff of their sets.
func TestRollbackRebuildsEveryVersion(t *testing.T) {
	f, seen := versions(t)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st, h := f.History()
	for v := uint64(1); v <= 6; v++ {
		c, err := RollbackCommand(st, h, v)
		if err != nil {
			t.Fatalf("rollback to %d: %v", v, err)
		}
		c.Now, c.Who = at(10), "root"
		var g FSM
		if err := g.Restore(snap); err != nil {
			t.Fatal(err)
		}
		res := applyMeta(t, &g, *c)
		got, gh := g.History()
		if d := sameSet(seen[v], got); res.Err != "" || d != "" {
			t.Fatalf("rollback to %d (%s): the set differs from version %d's:\n%s", v, res.Err, v, d)
		}
		if v == 6 {
			if res.Version != 6 || len(gh.Entries) != 6 {
				t.Errorf("rollback to the current version: %+v; want no new version", res)
			}
			continue
		}
		last := gh.Entries[len(gh.Entries)-1]
		if res.Version != 7 || last.Version != 7 || last.Op != OpRollback || last.To != v || last.Who != "root" || last.At != at(10) {
			t.Errorf("rollback to %d: version %d, entry %+v; want version 7, a rollback to %d by root", v, res.Version, last, v)
		}
		if want := policy.Diff(st.Policies, seen[v].Policies) + policy.ExtractionDiff(st.Extraction, seen[v].Extraction); res.Diff != want {
			t.Errorf("rollback to %d: diff %q; want %q", v, res.Diff, want)
		}
	}
	for a := uint64(1); a <= 6; a++ {
		for b := uint64(1); b <= 6; b++ {
			_, d, err := Diff(st, h, a, b, 0)
			want := policy.Diff(seen[a].Policies, seen[b].Policies) + policy.ExtractionDiff(seen[a].Extraction, seen[b].Extraction)
			if err != nil || d != want {
				t.Errorf("diff %d %d: %q (%v); want %q", a, b, d, err, want)
			}
		}
	}
	ch, d, _ := Diff(st, h, 1, 2, 0)
	if !slices.Equal(ch.Added, []string{"c"}) || !slices.Equal(ch.Changed, []string{"a"}) || !strings.Contains(d, "~ a: config.rate 5/s -> 50/s") {
		t.Errorf("diff 1 2: %+v %q", ch, d)
	}
}

// TestRollbackRefusals: an unknown version, a stale one, and a rollback
// that would not validate change nothing and say why.
func TestRollbackRefusals(t *testing.T) {
	f, _ := versions(t)
	st, h := f.History()
	for _, tt := range []struct {
		to   uint64
		want string
	}{
		{0, "to: the version to roll back to is required"},
		{7, "policy version 7 does not exist: the set is at version 6"},
	} {
		if _, err := RollbackCommand(st, h, tt.to); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("rollback to %d: %v; want %q", tt.to, err, tt.want)
		}
	}
	c, err := RollbackCommand(st, h, 2)
	if err != nil {
		t.Fatal(err)
	}
	applyMeta(t, f, Command{Op: OpApply, Now: at(7), Policies: mustParse(t, "policies:\n"+rated("e", "1/s"))})
	stale := *c
	stale.Now = at(8)
	if res := applyMeta(t, f, stale); res.Code != CodeStale || res.Version != 7 || res.Refusal().(*Error).Kind != Conflict {
		t.Errorf("a rollback computed at version 6 applied at 7: %+v; want refused as stale", res)
	}
	// The same validation as an apply: a body that clashes is refused.
	st, _ = f.History()
	bad := Command{Op: OpRollback, Now: at(9), To: 2, Base: st.Version, Policies: mustParse(t, "policies:\n"+rated("x", "1/s"))}
	bad.Policies[0].Algorithm = "NOPE"
	if res := applyMeta(t, f, bad); res.Code != CodeInvalid || res.Version != 7 || !strings.Contains(res.Err, "algorithm") {
		t.Errorf("an invalid rollback: %+v; want refused naming the algorithm", res)
	}
}

// lowerBounds sets the history's bounds for one test.
func lowerBounds(t *testing.T, versions, changes int) {
	old := historyBounds
	historyBounds.versions, historyBounds.changes = versions, changes
	t.Cleanup(func() { historyBounds = old })
}

// TestHistoryBounds: past either bound the oldest versions fall off; one
// that fell off is refused by name; the newest is always kept.
func TestHistoryBounds(t *testing.T) {
	t.Run("versions", func(t *testing.T) {
		lowerBounds(t, 5, 1000)
		f := &FSM{}
		for i := 1; i <= 8; i++ {
			applyMeta(t, f, Command{Op: OpApply, Now: at(i), Policies: mustParse(t, "policies:\n"+rated("a", fmt.Sprintf("%d/s", i)))})
		}
		st, h := f.History()
		if h.Oldest() != 4 || len(h.Entries) != 5 || h.FellOff != 3 || h.Dropped != 3 {
			t.Fatalf("oldest %d, %d entries, fell off %d, dropped %d; want 4, 5, 3, 3", h.Oldest(), len(h.Entries), h.FellOff, h.Dropped)
		}
		if _, err := RollbackCommand(st, h, 3); err == nil || !strings.Contains(err.Error(), "policy version 3 fell off the history, which keeps the last 5 versions and at most 1000 policy changes: the oldest kept is 4") {
			t.Errorf("rollback to a version that fell off: %v", err)
		}
		if _, _, err := Diff(st, h, 2, 8, 0); err == nil || !strings.Contains(err.Error(), "fell off") {
			t.Errorf("diff from a version that fell off: %v", err)
		}
		c, err := RollbackCommand(st, h, 4)
		if err != nil || len(c.Policies) != 1 || c.Policies[0].Config.Rate != "4/s" {
			t.Fatalf("rollback to the oldest kept: %+v %v", c, err)
		}
	})
	t.Run("changes", func(t *testing.T) {
		lowerBounds(t, 100, 10)
		f := &FSM{}
		six := func(rate string) []policy.Policy {
			var doc strings.Builder
			doc.WriteString("policies:\n")
			for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
				doc.WriteString(rated(id, rate))
			}
			return mustParse(t, doc.String())
		}
		for i, rate := range []string{"1/s", "2/s", "3/s"} {
			applyMeta(t, f, Command{Op: OpApply, Now: at(i + 1), Policies: six(rate)})
		}
		// Versions 2 and 3 each changed six: twelve, so 1 fell off and 2,
		// now the oldest, keeps no undo.
		_, h := f.History()
		if h.Oldest() != 2 || h.FellOff != 1 || h.Changes() != 6 {
			t.Fatalf("oldest %d, fell off %d, %d changes kept; want 2, 1, 6", h.Oldest(), h.FellOff, h.Changes())
		}
		// A version past the bound alone is still kept, with the one before.
		var doc strings.Builder
		doc.WriteString("policies:\n")
		for i := range 11 {
			doc.WriteString(rated(fmt.Sprintf("z%d", i), "1/s"))
		}
		applyMeta(t, f, Command{Op: OpApply, Now: at(9), Policies: mustParse(t, doc.String())})
		st, h := f.History()
		if len(h.Entries) != 2 || h.Oldest() != 3 || h.Changes() != 11 {
			t.Fatalf("after a change of 11: %d entries from %d, %d changes; want 3 and 4, 11", len(h.Entries), h.Oldest(), h.Changes())
		}
		if c, err := RollbackCommand(st, h, 3); err != nil || len(c.IDs) != 11 {
			t.Fatalf("undoing the big change: %+v %v", c, err)
		}
	})
}

// TestHistorySnapshots: a snapshot carries the history, and a rollback
// from the restored replica rebuilds as before; a snapshot from before the
// history restores without one, and the history starts at its version.
func TestHistorySnapshots(t *testing.T) {
	f, seen := versions(t)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var g FSM
	if err := g.Restore(snap); err != nil {
		t.Fatal(err)
	}
	_, want := f.History()
	st, got := g.History()
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if string(wb) != string(gb) || !reflect.DeepEqual(want.Entries[1].Undo[0].Before.Config, got.Entries[1].Undo[0].Before.Config) {
		t.Fatalf("restored history:\n%s\nwant\n%s", gb, wb)
	}
	c, err := RollbackCommand(st, got, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Now = at(10)
	if res := applyMeta(t, &g, *c); res.Err != "" || sameSet(seen[1], g.Policies()) != "" {
		t.Fatalf("rollback on the restored replica: %+v\n%s", res, sameSet(seen[1], g.Policies()))
	}

	var old FSM
	if err := old.Restore([]byte(goldenSnapshot)); err != nil {
		t.Fatal(err)
	}
	if _, h := old.History(); len(h.Entries) != 0 {
		t.Fatalf("an old snapshot restored a history: %+v", h)
	}
	before := old.Policies()
	applyMeta(t, &old, Command{Op: OpApply, Now: at(11), Policies: mustParse(t, "policies:\n"+rated("n", "1/s"))})
	st, h := old.History()
	if len(h.Entries) != 2 || h.Entries[0].Op != OpBaseline || h.Entries[0].Version != 2 || h.Entries[1].Version != 3 {
		t.Fatalf("history after an old snapshot: %+v; want the baseline 2, then 3", h.Entries)
	}
	if _, err := RollbackCommand(st, h, 1); err == nil || !strings.Contains(err.Error(), "not in the history: it starts at version 2") {
		t.Errorf("rollback to before the baseline: %v", err)
	}
	c, err = RollbackCommand(st, h, 2)
	if err != nil {
		t.Fatal(err)
	}
	c.Now = at(12)
	if res := applyMeta(t, &old, *c); res.Err != "" || sameSet(before, old.Policies()) != "" {
		t.Errorf("rollback to the baseline: %+v", res)
	}

	// A history that does not fit its set is dropped, not trusted.
	var bad FSM
	if err := bad.Restore([]byte(`{"record":null,"policy":{"version":3},"history":{"entries":[{"version":1,"op":"apply"},{"version":3,"op":"apply"}]}}`)); err != nil {
		t.Fatal(err)
	}
	if _, h := bad.History(); len(h.Entries) != 0 {
		t.Errorf("a history with a gap restored: %+v", h)
	}
}

// TestDiffClipped: a long diff keeps its first lines and counts the rest.
func TestDiffClipped(t *testing.T) {
	if got := clip("+ a\n+ b\n+ c\n", 2); got != "+ a\n+ b\n... 1 more lines\n" {
		t.Errorf("clip: %q", got)
	}
	if got := clip("+ a\n+ b\n", 2); got != "+ a\n+ b\n" {
		t.Errorf("clip within the bound: %q", got)
	}
}
