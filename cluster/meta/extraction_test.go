package meta

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

// TestMetaExtraction: the extraction is part of the versioned set: a
// change bumps the version and reaches the snapshot every node decides
// with; an apply without one leaves it, with prune resets it; other
// commands keep it; a snapshot carries it; a bad one is refused and
// changes nothing.
func TestMetaExtraction(t *testing.T) {
	var last *policy.Snapshot
	f := &FSM{OnPolicies: func(s *policy.Snapshot, _ int64) { last = s }}
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano()
	org := &extract.Extraction{Headers: map[string]string{"tenant_id": "X-Org"}, TrustedProxies: []string{"10.0.0.0/8"}}
	tenantOf := func(s *policy.Snapshot) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Org", "org1")
		r.Header.Set("X-Tenant-Id", "t1")
		return s.Extractor().Extract(r).TenantID
	}

	res := applyMeta(t, f, Command{Op: OpApply, Now: now, Policies: mustParse(t, metaDoc), Extraction: org})
	if res.Err != "" || res.Version != 1 || !res.Changes.Extraction || !strings.Contains(res.Diff, "~ extraction: headers.tenant_id (unset) -> X-Org") {
		t.Fatalf("apply with extraction: %+v", res)
	}
	if tenantOf(last) != "org1" || last.Version() != 1 {
		t.Fatalf("the swapped snapshot extracts tenant %q (version %d), want org1", tenantOf(last), last.Version())
	}
	// The same extraction again: nothing changes.
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 1, Policies: mustParse(t, metaDoc), Extraction: org}); res.Version != 1 || res.Changes.Extraction {
		t.Fatalf("same again: %+v", res)
	}
	// Only the extraction changes: the version moves.
	org2 := &extract.Extraction{Headers: map[string]string{"tenant_id": "X-Org"}}
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 2, Extraction: org2}); res.Err != "" || res.Version != 2 || !res.Changes.Extraction {
		t.Fatalf("extraction alone: %+v", res)
	}
	// A policy change, a delete and a block keep it.
	applyMeta(t, f, Command{Op: OpDelete, Now: now + 3, IDs: []string{"a"}})
	exp := time.Unix(0, now).Add(time.Hour)
	applyMeta(t, f, Command{Op: OpBlock, Now: now + 4, Block: &policy.Block{Scope: map[string]string{"ip": "1.2.3.4"}, ExpiresAt: exp}})
	if st := f.Policies(); st.Version != 4 || !extract.Same(st.Extraction, org2) || tenantOf(last) != "org1" {
		t.Fatalf("after delete and block: version %d, extraction %+v, extracts %q", st.Version, st.Extraction, tenantOf(last))
	}
	// A bad one is refused whole.
	bad := &extract.Extraction{TrustedProxies: []string{"nope"}}
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 5, Policies: mustParse(t, metaDoc), Extraction: bad}); res.Err == "" || res.Version != 4 || !strings.Contains(res.Err, "trusted_proxies[0]") {
		t.Fatalf("bad extraction: %+v", res)
	}
	if _, _, _, code, err := NextPolicies(nil, nil, &Command{Op: OpApply, Extraction: bad}, time.Unix(0, now)); err == nil || code != CodeInvalid {
		t.Fatalf("a dry run accepts a bad extraction: %v", err)
	}
	// A snapshot carries it, and restores to a snapshot that extracts alike.
	snap, err := f.Snapshot()
	if err != nil || !strings.Contains(string(snap), `"extraction":{"headers":{"tenant_id":"X-Org"}}`) {
		t.Fatalf("snapshot %s (%v)", snap, err)
	}
	var g FSM
	var restored *policy.Snapshot
	g.OnPolicies = func(s *policy.Snapshot, _ int64) { restored = s }
	if err := g.Restore(snap); err != nil || tenantOf(restored) != "org1" || !extract.Same(g.Policies().Extraction, org2) {
		t.Fatalf("restore: %v", err)
	}
	// An apply without extraction keeps it; with prune it is the whole set, so the defaults come back.
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 6, Policies: mustParse(t, metaDoc)}); res.Changes.Extraction {
		t.Fatalf("apply without extraction changed it: %+v", res)
	}
	if res = applyMeta(t, f, Command{Op: OpApply, Now: now + 7, Policies: mustParse(t, metaDoc), Prune: true}); !res.Changes.Extraction || f.Policies().Extraction != nil {
		t.Fatalf("prune without extraction: %+v, %+v", res, f.Policies().Extraction)
	}
	if tenantOf(last) != "t1" {
		t.Fatalf("after the reset the snapshot extracts %q, want the default header's t1", tenantOf(last))
	}
	// A snapshot with a bad extraction (from a peer or a disk) is refused.
	var h FSM
	if err := h.Restore([]byte(`{"record":null,"policy":{"version":1,"extraction":{"headers":{"ip":"X"}}}}`)); err == nil {
		t.Fatal("a snapshot with a bad extraction restored")
	}
}

// The formats with an extraction, fixed like the older ones in
// format_test.go: what this version writes, later ones must read.
func TestExtractionFormats(t *testing.T) {
	const (
		cmd  = `{"op":"apply","now":5,"policies":[{"policy_id":"a","key":["ip"],"algorithm":"TOKEN_BUCKET","config":{"rate":"10/s"}}],"extraction":{"headers":{"tenant_id":"X-Org","user_id":""},"custom":{"team":"X-Team"},"trusted_proxies":["10.0.0.0/8"],"client_ip_headers":["X-Real-IP"]}}`
		snap = `{"record":null,"policy":{"version":1,"policies":[{"policy_id":"a","key":["ip"],"algorithm":"TOKEN_BUCKET","config":{"rate":"10/s"},"updated_at":"1970-01-01T00:00:00.000000005Z"}],"extraction":{"headers":{"tenant_id":"X-Org","user_id":""},"custom":{"team":"X-Team"},"trusted_proxies":["10.0.0.0/8"],"client_ip_headers":["X-Real-IP"]}},"history":{"entries":[{"version":1,"at":5,"op":"apply","added":{"count":1,"ids":["a"]},"extraction":true}]}}`
		res  = `{"version":0,"changes":{"Added":null,"Changed":null,"Removed":null,"Unchanged":null,"Extraction":true}}`
	)
	var c Command
	if err := json.Unmarshal([]byte(cmd), &c); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(c); string(b) != cmd {
		t.Errorf("command:\n%s\nwant\n%s", b, cmd)
	}
	var f FSM
	if r, ok := f.Apply([]byte(cmd)).(Result); !ok || r.Err != "" {
		t.Fatalf("apply: %+v", r)
	}
	if b, err := f.Snapshot(); err != nil || string(b) != snap {
		t.Errorf("snapshot (%v):\n%s\nwant\n%s", err, b, snap)
	}
	if b, _ := json.Marshal(Result{Changes: policy.Changes{Extraction: true}}); string(b) != res {
		t.Errorf("result:\n%s\nwant\n%s", b, res)
	}
}
