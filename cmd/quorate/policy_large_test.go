package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/quorate/quorate/policy"
)

// A large set is cut into documents under the bound, every policy once,
// each after the policy it extends.
func TestSplitPolicies(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("policies:\n")
	// Children first in the file: the split must reorder them.
	for i := range 3000 {
		fmt.Fprintf(&doc, "  - { policy_id: child_%d, extends: mid_%d, scope: { tenant_id: t_%d } }\n", i, i%10, i)
	}
	for i := range 10 {
		fmt.Fprintf(&doc, "  - { policy_id: mid_%d, extends: base, priority: %d }\n", i, i+1)
	}
	doc.WriteString("  - { policy_id: base, key: [tenant_id], algorithm: TOKEN_BUCKET, config: { rate: 10/s } }\n")
	ps, err := policy.Parse("big.yaml", []byte(doc.String()))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := splitPolicies(ps, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 3 {
		t.Fatalf("%d parts of a %d-byte set at 64 KiB each", len(parts), doc.Len())
	}
	seen := map[string]int{} // id -> part
	for k, p := range parts {
		if len(p) > 64<<10 {
			t.Fatalf("part %d: %d bytes, more than the bound", k, len(p))
		}
		got, err := policy.Parse("part.json", []byte(p))
		if err != nil {
			t.Fatalf("part %d does not parse: %v", k, err)
		}
		for _, q := range got {
			if _, dup := seen[q.ID]; dup {
				t.Fatalf("%s in two parts", q.ID)
			}
			if parent, ok := seen[q.Extends]; q.Extends != "" && (!ok || parent > k) {
				t.Fatalf("%s (part %d) before its parent %s", q.ID, k, q.Extends)
			}
			seen[q.ID] = k
		}
	}
	if len(seen) != len(ps) {
		t.Fatalf("%d policies in the parts, %d in the file", len(seen), len(ps))
	}
	// A part is the file's policies as written: compare one.
	a, _ := json.Marshal(ps[0])
	if !strings.Contains(strings.Join(parts, ""), string(a)) {
		t.Fatalf("child_0 changed on the way: %s", a)
	}
}
