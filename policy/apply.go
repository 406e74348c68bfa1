package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/quorate/quorate/policy/extract"
)

// Changes lists what ApplySet or Delete did, as sorted ids. Unchanged
// are the applied document's policies that the set already held as they
// are, not the rest of the set: at 300k policies, a change of one would
// otherwise answer with 300k ids.
type Changes struct {
	Added, Changed, Removed, Unchanged []string
	// Extraction is true when the set's extraction changed (omitted when
	// false: the meta log's result format predates it).
	Extraction bool `json:",omitempty"`
}

// ApplySet computes the next set when incoming is applied over current as
// the desired set: policies in incoming replace those with the same id; with
// prune, ids not in incoming are removed, otherwise they stay. UpdatedAt is
// now for added or changed policies and kept for unchanged ones. The result
// is validated as a whole; on error nothing changes (current is never
// modified). next is sorted by id, and shares current's unchanged
// policies: a set's policies are never modified.
func ApplySet(current []*Policy, incoming []Policy, prune bool, now time.Time) (next []*Policy, ch Changes, err error) {
	next, ch, err = applySet(current, incoming, prune, now)
	return next, ch, invalid(err)
}

func applySet(current []*Policy, incoming []Policy, prune bool, now time.Time) (next []*Policy, ch Changes, err error) {
	next, ch, err = merge(current, incoming, prune, now)
	if err != nil {
		return nil, Changes{}, err
	}
	if _, _, err := build(next); err != nil {
		return nil, Changes{}, err
	}
	return next, ch, nil
}

// Change is ApplySet then Compile of the result, validating once: what a
// replica does for every change. Validation is most of a change's cost at
// large sets, so it must not run twice.
func Change(current []*Policy, incoming []Policy, prune bool, now time.Time, blocks []Block, version uint64) (*Snapshot, []*Policy, Changes, error) {
	next, ch, err := merge(current, incoming, prune, now)
	if err != nil {
		return nil, nil, Changes{}, invalid(err)
	}
	s, err := compile(next, blocks, version)
	if err != nil {
		return nil, nil, Changes{}, invalid(err)
	}
	return s, next, ch, nil
}

// merge is ApplySet without the validation of the result.
func merge(current []*Policy, incoming []Policy, prune bool, now time.Time) (next []*Policy, ch Changes, err error) {
	in := make(map[string]int, len(incoming))
	for i := range incoming {
		if j, ok := in[incoming[i].ID]; ok {
			return nil, Changes{}, dupErr(&incoming[i], &incoming[j])
		}
		in[incoming[i].ID] = i
	}
	cur := make(map[string]*Policy, len(current))
	next = make([]*Policy, 0, len(current)+len(incoming))
	for _, p := range current {
		cur[p.ID] = p
		if _, ok := in[p.ID]; ok {
			continue
		}
		if prune {
			ch.Removed = append(ch.Removed, p.ID)
			continue
		}
		next = append(next, p)
	}
	for _, p := range incoming {
		old, ok := cur[p.ID]
		switch {
		case !ok:
			p.UpdatedAt = now
			ch.Added = append(ch.Added, p.ID)
		case same(old, &p):
			p.UpdatedAt = old.UpdatedAt
			ch.Unchanged = append(ch.Unchanged, p.ID)
		default:
			p.UpdatedAt = now
			ch.Changed = append(ch.Changed, p.ID)
		}
		next = append(next, &p)
	}
	next = sortedByID(next)
	ch.sort()
	return next, ch, nil
}

// Delete removes ids. An unknown id is an error naming it; deleting a policy
// that a remaining one extends is an error naming both.
func Delete(current []*Policy, ids []string) ([]*Policy, Changes, error) {
	del := make(map[string]bool, len(ids))
	for _, id := range ids {
		del[id] = true
	}
	var ch Changes
	next := make([]*Policy, 0, len(current))
	for _, p := range current {
		if del[p.ID] {
			ch.Removed = append(ch.Removed, p.ID)
			continue
		}
		next = append(next, p)
	}
	for _, id := range ids {
		if !slices.Contains(ch.Removed, id) {
			return nil, Changes{}, kindError{fmt.Errorf("policy %s: no such policy", id), ErrNotFound}
		}
	}
	for _, p := range next {
		if del[p.Extends] {
			return nil, Changes{}, invalid(fmt.Errorf("policy %s: cannot delete it: policy %s extends it (delete or change %s too)", p.Extends, p.ID, p.ID))
		}
	}
	ch.Removed = slices.Compact(ch.Removed)
	ch.sort()
	return next, ch, nil
}

func (c *Changes) sort() {
	for _, s := range [][]string{c.Added, c.Changed, c.Removed, c.Unchanged} {
		sort.Strings(s)
	}
}

func cmpID(a, b *Policy) int { return strings.Compare(a.ID, b.ID) }

// sortedByID returns ps sorted by id: ps itself if it is, else a sorted
// copy (stable: of two policies with one id, the first stays first, as
// the duplicate's message names them).
func sortedByID(ps []*Policy) []*Policy {
	if slices.IsSortedFunc(ps, cmpID) {
		return ps
	}
	out := slices.Clone(ps)
	slices.SortStableFunc(out, cmpID)
	return out
}

// SetOf is the set of the document ps as Compile, ApplySet and Change
// take it: a pointer to each policy, in ps's order. ps must not be
// modified afterwards.
func SetOf(ps []Policy) []*Policy {
	out := make([]*Policy, len(ps))
	for i := range ps {
		out[i] = &ps[i]
	}
	return out
}

// Same reports whether two policies say the same thing, whenever they were
// updated and wherever they were written: what a change compares.
func Same(a, b *Policy) bool { return same(a, b) }

// same reports whether two policies say the same thing, whenever they were
// updated and wherever they were written.
func same(a, b *Policy) bool {
	x, y := *a, *b
	x.UpdatedAt, y.UpdatedAt, x.src, y.src = time.Time{}, time.Time{}, nil, nil
	if x.IsEnabled() && y.IsEnabled() {
		x.Enabled, y.Enabled = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

// canonical is p's JSON without the server-set time, and with enabled: true
// written as unset, which it means.
func canonical(p *Policy) []byte {
	q := *p
	q.UpdatedAt = time.Time{}
	if q.IsEnabled() {
		q.Enabled = nil
	}
	b, _ := json.Marshal(&q) // cannot fail: the model has only marshalable fields
	return b
}

// Diff renders what goes from current to next like a plan: "+ plan_free",
// "~ plan_pro: config.rate 3000/min -> 4000/min", "- old", one line each,
// sorted by id. It is empty when nothing changes.
func Diff(current, next []*Policy) string {
	cur := make(map[string]*Policy, len(current))
	for _, p := range current {
		cur[p.ID] = p
	}
	nxt := make(map[string]*Policy, len(next))
	for _, p := range next {
		nxt[p.ID] = p
	}
	var lines []string
	for id, p := range nxt {
		old, ok := cur[id]
		switch {
		case !ok:
			lines = append(lines, "+ "+id)
		case !same(old, p):
			lines = append(lines, "~ "+id+": "+fieldDiff(old, p))
		}
	}
	for id := range cur {
		if _, ok := nxt[id]; !ok {
			lines = append(lines, "- "+id)
		}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][2:] < lines[j][2:] })
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

func fieldDiff(a, b *Policy) string {
	fa, fb := flatten(a), flatten(b)
	var out []string
	for _, k := range sortedKeys(union(fa, fb)) {
		va, oka := fa[k]
		vb, okb := fb[k]
		if oka && okb && va == vb {
			continue
		}
		out = append(out, k+" "+orUnset(va, oka)+" -> "+orUnset(vb, okb))
	}
	return strings.Join(out, ", ")
}

func orUnset(v string, ok bool) string {
	if !ok {
		return "(unset)"
	}
	return v
}

func union(a, b map[string]string) map[string]string {
	u := make(map[string]string, len(a)+len(b))
	for k := range a {
		u[k] = ""
	}
	for k := range b {
		u[k] = ""
	}
	return u
}

// flatten maps each leaf field path of p's canonical form to its value.
func flatten(p *Policy) map[string]string { return flattenJSON(canonical(p)) }

// flattenJSON maps each leaf field path of a JSON document to its value.
func flattenJSON(b []byte) map[string]string {
	var v any
	_ = json.Unmarshal(b, &v)
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(strings.TrimPrefix(path+"."+k, "."), e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case string:
			out[path] = x
		default:
			b, _ := json.Marshal(x)
			out[path] = string(b)
		}
	}
	walk("", v)
	return out
}

func canonicalExtraction(e *extract.Extraction) []byte {
	if e == nil {
		e = &extract.Extraction{}
	}
	b, _ := json.Marshal(e) // cannot fail: maps and lists of strings
	return b
}

// ExtractionDiff renders a change of extraction as Diff does a policy's:
// "~ extraction: headers.tenant_id (unset) -> X-Org\n"; "" if none.
func ExtractionDiff(cur, next *extract.Extraction) string {
	if extract.Same(cur, next) {
		return ""
	}
	fa, fb := flattenJSON(canonicalExtraction(cur)), flattenJSON(canonicalExtraction(next))
	var out []string
	for _, k := range sortedKeys(union(fa, fb)) {
		va, oka := fa[k]
		vb, okb := fb[k]
		if oka && okb && va == vb {
			continue
		}
		out = append(out, k+" "+orUnset(va, oka)+" -> "+orUnset(vb, okb))
	}
	return "~ extraction: " + strings.Join(out, ", ") + "\n"
}
