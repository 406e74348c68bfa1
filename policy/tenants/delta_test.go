package tenants

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

func contents(t *Table) map[string]string {
	m := map[string]string{}
	t.Range(func(id, plan string) bool {
		m[id] = plan
		return true
	})
	return m
}

// TestDeltaFrom: a gateway that patches its copy with each delta holds
// the table the replica holds, through random sets and deletes (growth
// that rebuilds the table included, where the whole table is sent), and
// a delta names only what changed.
func TestDeltaFrom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var cur, gw *Table
	deltas, wholes := 0, 0
	for step := range 300 {
		old := cur
		var as []Assignment
		for range 1 + r.IntN(300) {
			as = append(as, Assignment{TenantID: fmt.Sprintf("t_%d", r.IntN(100_000)), Plan: []string{"FREE", "PRO", "ENT"}[r.IntN(3)]})
		}
		cur, _ = cur.Set(as)
		var ids []string
		for range r.IntN(10) {
			ids = append(ids, fmt.Sprintf("t_%d", r.IntN(100_000)))
		}
		cur, _ = cur.Delete(ids)
		d, ok := cur.DeltaFrom(old, 1000)
		if !ok {
			wholes++
			gw = cur.WithVersion(cur.Version()) // the whole table, as sent
			continue
		}
		deltas++
		if n := len(d.Set) + len(d.Deleted); n > len(as)+len(ids) {
			t.Fatalf("step %d: a delta of %d for a change of %d", step, n, len(as)+len(ids))
		}
		next, err := gw.Patched(d, cur.Version())
		if err != nil {
			t.Fatal(err)
		}
		if gw = next; gw.Version() != cur.Version() || !maps.Equal(contents(gw), contents(cur)) {
			t.Fatalf("step %d: the patched table differs (version %d, want %d)", step, gw.Version(), cur.Version())
		}
	}
	t.Logf("%d deltas, %d whole tables", deltas, wholes)
	if deltas < 250 || wholes < 2 {
		t.Fatalf("%d deltas, %d whole tables: the steps do not cover both", deltas, wholes)
	}
	if _, ok := cur.DeltaFrom(nil, 1000); ok {
		t.Error("a delta from nothing")
	}
	big, _ := cur.Set([]Assignment{{"x_1", "PRO"}, {"x_2", "PRO"}, {"x_3", "PRO"}})
	if _, ok := big.DeltaFrom(cur, 2); ok {
		t.Error("a delta over its bound")
	}
}

// TestPatchedValidates: a delta's assignments are checked as a table's.
func TestPatchedValidates(t *testing.T) {
	if _, err := (*Table)(nil).Patched(Delta{Set: List{{TenantID: "", Plan: "PRO"}}}, 1); err == nil {
		t.Error("an empty tenant id patched in")
	}
	if _, err := (*Table)(nil).Patched(Delta{Deleted: []string{"bad\x00"}}, 1); err == nil {
		t.Error("a control character deleted")
	}
}
