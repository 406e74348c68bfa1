package tenants

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func set(t *testing.T, tb *Table, pairs ...string) (*Table, Changes) {
	t.Helper()
	var as []Assignment
	for i := 0; i < len(pairs); i += 2 {
		as = append(as, Assignment{pairs[i], pairs[i+1]})
	}
	return tb.Set(as)
}

func plan(tb *Table, id string) string {
	p, ok := tb.Plan(id)
	if !ok {
		return "-"
	}
	return p
}

// TestSetDelete: a change that changes something makes a new table at the
// next version and leaves the old one as it was; one that changes nothing
// returns the table itself.
func TestSetDelete(t *testing.T) {
	var empty *Table
	if plan(empty, "t_1") != "-" || empty.Len() != 0 || empty.Version() != 0 {
		t.Fatal("the nil table is not empty")
	}
	t1, ch := set(t, empty, "t_1", "FREE", "t_2", "PRO", "t_1", "PRO") // t_1 listed twice: the last wins
	if ch != (Changes{Set: 3}) || t1.Len() != 2 || t1.Version() != 1 || plan(t1, "t_1") != "PRO" || plan(t1, "t_2") != "PRO" {
		t.Fatalf("first set: %+v, len %d, version %d, t_1 %s", ch, t1.Len(), t1.Version(), plan(t1, "t_1"))
	}
	if got := t1.Plans(); !maps.Equal(got, map[string]int{"PRO": 2}) {
		t.Errorf("plans %v; want PRO: 2 (FREE lost its only tenant)", got)
	}
	t2, ch := set(t, t1, "t_2", "PRO", "t_3", "FREE")
	if ch != (Changes{Set: 1, Unchanged: 1}) || t2.Version() != 2 || t2.Len() != 3 {
		t.Fatalf("second set: %+v, version %d, len %d", ch, t2.Version(), t2.Len())
	}
	if plan(t1, "t_3") != "-" || t1.Len() != 2 || t1.Version() != 1 {
		t.Error("the second set changed the first table")
	}
	same, ch := set(t, t2, "t_3", "FREE")
	if same != t2 || ch.Changed() {
		t.Errorf("a set that changes nothing: %+v, a new table %v", ch, same != t2)
	}
	t3, ch := t2.Delete([]string{"t_1", "nope", "t_1"})
	if ch != (Changes{Deleted: 1, Missing: 2}) || t3.Len() != 2 || t3.Version() != 3 || plan(t3, "t_1") != "-" || plan(t2, "t_1") != "PRO" {
		t.Fatalf("delete: %+v, len %d, version %d", ch, t3.Len(), t3.Version())
	}
	if got := t3.Plans(); !maps.Equal(got, map[string]int{"PRO": 1, "FREE": 1}) {
		t.Errorf("plans after the delete %v", got)
	}
	if same, ch := t3.Delete([]string{"nope"}); same != t3 || ch.Changed() {
		t.Errorf("deleting what is not there: %+v", ch)
	}
}

// TestManyTenants: ids spread over every map; every one reads back, a
// chunk's change leaves the others' maps shared, and deleting all empties
// the table.
func TestManyTenants(t *testing.T) {
	const n = 200_000
	as := make([]Assignment, n)
	for i := range as {
		as[i] = Assignment{fmt.Sprintf("t_%d", i), []string{"FREE", "PRO", "ENTERPRISE"}[i%3]}
	}
	tb, ch := (*Table)(nil).Set(as)
	if ch.Set != n || tb.Len() != n {
		t.Fatalf("%+v, len %d", ch, tb.Len())
	}
	next, _ := tb.Set([]Assignment{{"t_7", "ENTERPRISE"}})
	shared, nonNil := 0, 0
	if tb.bits != next.bits {
		t.Fatalf("a one-tenant change rebuilt the table: %d bits, then %d", tb.bits, next.bits)
	}
	for i := range tb.root {
		for j := range tb.root[i] {
			a, b := tb.root[i][j], next.root[i][j]
			if a != nil {
				nonNil++
			}
			if a != nil && reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() {
				shared++
			}
		}
	}
	if shared != nonNil-1 {
		t.Errorf("%d of %d maps shared after a one-tenant change; want all but one", shared, nonNil)
	}
	if got := plan(tb, "t_7"); got != "PRO" {
		t.Errorf("the change moved t_7 to %s in the table before it too", got)
	}
	for i, a := range as {
		want := a.Plan
		if i == 7 {
			want = "ENTERPRISE"
		}
		if got := plan(next, a.TenantID); got != want {
			t.Fatalf("%s: %s, want %s", a.TenantID, got, want)
		}
	}
	ids := make([]string, n)
	for i, a := range as {
		ids[i] = a.TenantID
	}
	gone, ch := next.Delete(ids)
	if ch.Deleted != n || gone.Len() != 0 || len(gone.Plans()) != 0 {
		t.Fatalf("deleting all: %+v, len %d, plans %v", ch, gone.Len(), gone.Plans())
	}
	gone.Range(func(id, _ string) bool { t.Fatalf("%s left after deleting all", id); return false })
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		a          Assignment
		field, msg string
	}{
		{Assignment{"", "PRO"}, "tenant_id", "required"},
		{Assignment{"t_1", ""}, "plan", "required"},
		{Assignment{strings.Repeat("x", 257), "PRO"}, "tenant_id", "257 bytes, at most 256"},
		{Assignment{"t_1", "P\tRO"}, "plan", "control character U+0009"},
		{Assignment{"t\xff", "PRO"}, "tenant_id", "not valid UTF-8"},
	} {
		var fe *FieldError
		if err := Validate(tc.a); !errors.As(err, &fe) || fe.Field != tc.field || fe.Msg != tc.msg {
			t.Errorf("%q: %v; want %s: %s", tc.a, err, tc.field, tc.msg)
		}
	}
	if err := Validate(Assignment{"t_1", "plan_pro"}); err != nil {
		t.Error(err)
	}
}

// TestTableJSON: a table reads back from its snapshot form with its
// version; a form with an id under two plans is refused.
func TestTableJSON(t *testing.T) {
	tb, _ := set(t, nil, "t_1", "FREE", "t_2", "PRO", "t_3", "PRO")
	tb, _ = tb.Delete([]string{"t_3"})
	b, err := json.Marshal(tb)
	if err != nil {
		t.Fatal(err)
	}
	var back Table
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Version() != 2 || back.Len() != 2 || plan(&back, "t_1") != "FREE" || plan(&back, "t_2") != "PRO" {
		t.Fatalf("%s read back as version %d, %d tenants", b, back.Version(), back.Len())
	}
	for doc, want := range map[string]string{
		`{"version":3,"plans":{"FREE":["t_1"],"PRO":["t_1"]}}`: "listed under two plans",
		`{"version":3,"plans":{"FREE":[""]}}`:                  "tenant_id: required",
	} {
		if err := json.Unmarshal([]byte(doc), &back); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", doc, err, want)
		}
	}
}

// TestListJSON: a List is pairs, and EncodedSize is exactly what each
// takes, escapes included.
func TestListJSON(t *testing.T) {
	l := List{{"t_1", "PRO"}, {`a"b\c<d>&e` + "\u2028é", "FREE"}}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[["t_1","PRO"],["a\"b\\c\u003cd\u003e\u0026e\u2028é","FREE"]]`; string(b) != want {
		t.Errorf("%s\nwant %s", b, want)
	}
	size := 1 // the list's brackets, less the last comma
	for _, a := range l {
		size += EncodedSize(a)
	}
	if size != len(b) {
		t.Errorf("EncodedSize adds to %d; the JSON is %d bytes", size, len(b))
	}
	var back List
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 2 || back[1] != l[1] {
		t.Errorf("read back %q (%v)", back, err)
	}
}

// TestGrowth: a table grown a chunk at a time is rebuilt in larger shapes
// as it grows, every assignment still there, and the tables before each
// rebuild still as they were.
func TestGrowth(t *testing.T) {
	var tb *Table
	var kept []*Table
	for from := 0; from < 100_000; from += 1000 {
		var as []Assignment
		for i := from; i < from+1000; i++ {
			as = append(as, Assignment{fmt.Sprintf("t_%d", i), "P"})
		}
		tb, _ = tb.Set(as)
		kept = append(kept, tb)
	}
	if tb.bits <= kept[0].bits || tb.n > rebuildAt<<tb.bits {
		t.Errorf("grew from %d to %d bits for %d tenants", kept[0].bits, tb.bits, tb.n)
	}
	for k, old := range kept {
		if old.Len() != (k+1)*1000 {
			t.Fatalf("table %d holds %d", k, old.Len())
		}
		n := 0
		old.Range(func(string, string) bool { n++; return true })
		if n != old.Len() {
			t.Fatalf("table %d: %d in range, Len %d", k, n, old.Len())
		}
	}
	for i := range 100_000 {
		if plan(tb, fmt.Sprintf("t_%d", i)) != "P" {
			t.Fatalf("t_%d lost", i)
		}
	}
}

// TestPage: pages follow one another in id order without gaps or
// repeats, filtered by plan, and say whether more follow.
func TestPage(t *testing.T) {
	var as []Assignment
	for i := range 1000 {
		as = append(as, Assignment{fmt.Sprintf("t_%04d", i), []string{"FREE", "PRO"}[i%2]})
	}
	tb, _ := (*Table)(nil).Set(as)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		page, more := tb.Page(after, 300, "PRO")
		for _, a := range page {
			if a.Plan != "PRO" {
				t.Fatalf("%s on %s in a PRO page", a.TenantID, a.Plan)
			}
			got = append(got, a.TenantID)
		}
		if !more {
			if pages != 1 || len(page) != 200 {
				t.Errorf("last page: %d assignments after %d pages; want 200 after 1", len(page), pages)
			}
			break
		}
		after = page[len(page)-1].TenantID
	}
	if len(got) != 500 || got[0] != "t_0001" || got[499] != "t_0999" || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != 500 {
		t.Errorf("%d PRO tenants paged, from %s to %s", len(got), got[0], got[len(got)-1])
	}
	if page, more := tb.Page("t_0998", 10, ""); len(page) != 1 || more || page[0].TenantID != "t_0999" {
		t.Errorf("after t_0998: %v %v", page, more)
	}
}
