package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/quorate/quorate/policy"
)

// The document import sends parses as the node parses it, and an earlier
// import's policies of the same domains that the file dropped are stale.
func TestEnvoyDocument(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rl.yaml")
	cfg := "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}\n  - {key: b, value: x, rate_limit: {unlimited: true}}\n"
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, ids, domains, err := envoyDocument(file, "GCRA")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := policy.Parse("doc", []byte(doc))
	if err != nil {
		t.Fatalf("the node would refuse the document: %v\n%s", err, doc)
	}
	if len(ps) != 2 || len(ids) != 2 || !domains["d"] || ps[0].Algorithm != "GCRA" {
		t.Fatalf("policies %+v ids %v domains %v", ps, ids, domains)
	}
	var docs []string
	for _, p := range ps {
		js, _ := json.Marshal(p)
		docs = append(docs, string(js))
	}
	old := ps[0]
	old.ID = "envoy.d.0000000000000000"
	js, _ := json.Marshal(old)
	other := `{"policy_id": "plan", "description": "envoy:not json"}`
	stale := staleImports(append(docs, string(js), other), ids, domains)
	if !slices.Equal(stale, []string{old.ID}) {
		t.Fatalf("stale %v, want [%s]", stale, old.ID)
	}
	if st := staleImports([]string{string(js)}, ids, map[string]bool{"e": true}); len(stale) == 0 || len(st) != 0 {
		t.Fatalf("another domain's imports are not stale: %v", st)
	}
	if _, _, _, err := envoyDocument(file, "NOPE"); err == nil {
		t.Fatal("an unknown --algorithm was accepted")
	}
}
