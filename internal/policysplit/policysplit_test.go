package policysplit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/quorate/quorate/policy"
)

// A large set is cut into documents under the bound, every policy once,
// each after the policy it extends.
func TestSplit(t *testing.T) {
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
	parts, err := Split(ps, 64<<10)
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

// A policy that alone is too large for a part is refused by name, as is a
// file of none; a cycle of extends is still split, each policy once.
func TestSplitRefuses(t *testing.T) {
	big := policy.Policy{ID: "big", Description: strings.Repeat("x", 2000)}
	if _, err := Split([]policy.Policy{{ID: "small"}, big}, 1024); err == nil || !strings.HasPrefix(err.Error(), "policy big: ") || !strings.HasSuffix(err.Error(), " bytes, more than one message") {
		t.Errorf("a policy over the bound: %v", err)
	}
	if _, err := Split(nil, 1024); err == nil || err.Error() != "no policies in the file" {
		t.Errorf("no policies: %v", err)
	}
	cycle := []policy.Policy{{ID: "a", Extends: "b"}, {ID: "b", Extends: "a"}, {ID: "c", Extends: "a"}}
	parts, err := Split(cycle, 1024)
	if err != nil || len(parts) != 1 {
		t.Fatalf("a cycle: %q, %v", parts, err)
	}
	var doc struct{ Policies []policy.Policy }
	if err := json.Unmarshal([]byte(parts[0]), &doc); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range doc.Policies {
		ids = append(ids, p.ID)
	}
	// a and b are each one hop from the other; c is two from b.
	if got := strings.Join(ids, " "); got != "a b c" {
		t.Errorf("a cycle's order: %s; want a b c", got)
	}
}

// Parts are filled up to the bound, not one policy each.
func TestSplitFills(t *testing.T) {
	ps := make([]policy.Policy, 100)
	for i := range ps {
		ps[i] = policy.Policy{ID: fmt.Sprintf("p_%03d", i)}
	}
	one, _ := json.Marshal(&ps[0])
	parts, err := Split(ps, 10*(len(one)+1)+docOverhead)
	if err != nil || len(parts) != 10 {
		t.Fatalf("%d parts, %v; want 10 of 10 policies", len(parts), err)
	}
}
