// Package tenants is the assignment of tenants to plans as an immutable
// table: which plan tenant t_1 is on, read without a lock on the check path.
//
// A Table never changes: Set and Delete return a new one that shares every
// part the change did not touch, so a replica applies a change in time
// that grows with the change, not with the table, and the check path reads
// whichever table was current without a lock.
package tenants

import (
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"unicode"
	"unicode/utf8"
)

// Assignment puts one tenant on a plan. Plan is a tier value (what a plan
// policy's scope names as tenant_tier, e.g. PRO) or a plan policy's id
// (plan_pro); policy.Snapshot says which tier it means.
type Assignment struct {
	TenantID string `json:"tenant_id"`
	Plan     string `json:"plan"`
}

// MaxValueLen bounds a tenant id and a plan, as a request's descriptor
// values are bounded.
const MaxValueLen = 256

// FieldError is an assignment refused for one field ("tenant_id", "plan").
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return "tenants: " + e.Field + ": " + e.Msg }

// Validate checks an assignment as a request's descriptors are checked:
// both fields present, at most MaxValueLen bytes of UTF-8 without control
// characters. The error is a *FieldError naming the field.
func Validate(a Assignment) error {
	if err := checkValue("tenant_id", a.TenantID); err != nil {
		return err
	}
	return checkValue("plan", a.Plan)
}

// ValidateID checks a tenant id alone (a delete or a lookup).
func ValidateID(id string) error { return checkValue("tenant_id", id) }

func checkValue(field, v string) error {
	switch {
	case v == "":
		return &FieldError{field, "required"}
	case len(v) > MaxValueLen:
		return &FieldError{field, fmt.Sprintf("%d bytes, at most %d", len(v), MaxValueLen)}
	case !utf8.ValidString(v):
		return &FieldError{field, "not valid UTF-8"}
	}
	for _, c := range v {
		if unicode.IsControl(c) {
			return &FieldError{field, fmt.Sprintf("control character %U", c)}
		}
	}
	return nil
}

// seed is this process's: where an id sits is the node's own business,
// never replicated.
var seed = maphash.MakeSeed()

// Table is an immutable assignment of tenants to plans, at a version. The
// nil *Table is the empty one at version 0.
//
// The ids are spread by a hash over 2^bits small maps, reached through a
// root array and a middle array of 2^(bits/2) each, so that a change
// copies those two short arrays and the maps it writes, and shares the
// rest with the table before it. bits grows with the table (about 16
// tenants a map), the whole table rebuilt when it does: a lookup is two
// array reads and a small map's read at any size.
type Table struct {
	version uint64
	n       int
	shape
	root []mid // nil while empty
	// plans counts the tenants on each plan, and keeps one copy of each
	// plan's name for every assignment to share.
	plans map[string]planCount
}

// mid is one root slot's maps.
type mid []map[string]string

// shape is where an id's hash puts it: root[h>>rootShift], then
// [(h>>midShift)&midMask].
type shape struct {
	bits                uint8
	rootShift, midShift uint8
	midMask             uint64
}

// Shape bounds: at least 256 maps; a rebuild when they average over
// rebuildAt tenants, to a shape of about perMap.
const (
	minBits   = 8
	maxBits   = 24
	perMap    = 16
	rebuildAt = 64
)

func shapeOf(bits uint8) shape {
	rb, mb := (bits+1)/2, bits/2
	return shape{bits: bits, rootShift: 64 - rb, midShift: 64 - rb - mb, midMask: 1<<mb - 1}
}

// shapeFor is the shape for n tenants.
func shapeFor(n int) shape {
	b := uint8(minBits)
	for b < maxBits && n > perMap<<b {
		b++
	}
	return shapeOf(b)
}

func (s shape) slot(id string) (i, j uint64) {
	h := maphash.String(seed, id)
	return h >> s.rootShift, (h >> s.midShift) & s.midMask
}

type planCount struct {
	name string
	n    int
}

// Plan returns the plan tenant id is on: two array reads and a small
// map's read.
func (t *Table) Plan(id string) (string, bool) {
	if t == nil || t.root == nil {
		return "", false
	}
	i, j := t.slot(id)
	m := t.root[i]
	if m == nil {
		return "", false
	}
	p, ok := m[j][id]
	return p, ok
}

// Len is the number of tenants assigned.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Version counts the changes that changed something.
func (t *Table) Version() uint64 {
	if t == nil {
		return 0
	}
	return t.version
}

// Plans returns how many tenants each plan has.
func (t *Table) Plans() map[string]int {
	out := make(map[string]int, t.numPlans())
	if t != nil {
		for p, c := range t.plans {
			out[p] = c.n
		}
	}
	return out
}

func (t *Table) numPlans() int {
	if t == nil {
		return 0
	}
	return len(t.plans)
}

// NumPlans is the number of distinct plans in use.
func (t *Table) NumPlans() int { return t.numPlans() }

// Range calls fn for every assignment, in no particular order, until fn
// returns false.
func (t *Table) Range(fn func(id, plan string) bool) {
	if t == nil {
		return
	}
	for _, m := range t.root {
		for _, leaf := range m {
			for id, p := range leaf {
				if !fn(id, p) {
					return
				}
			}
		}
	}
}

// Changes counts what a Set or Delete did.
type Changes struct {
	// Set: assignments added or moved to another plan; Unchanged: already so.
	Set, Unchanged int
	// Deleted: assignments removed; Missing: ids that had none.
	Deleted, Missing int
}

// Changed reports whether the table changed.
func (c Changes) Changed() bool { return c.Set+c.Deleted > 0 }

// Set returns t with every assignment of as in force, in order (a tenant
// listed twice ends on its last plan), at the next version if anything
// changed; else t itself. t does not change. Validate the assignments
// first: Set stores what it is given.
func (t *Table) Set(as []Assignment) (*Table, Changes) {
	w := newWriter(t, len(as))
	var ch Changes
	for _, a := range as {
		i, j := w.next.slot(a.TenantID)
		old, had := w.get(i, j, a.TenantID)
		if had && old == a.Plan {
			ch.Unchanged++
			continue
		}
		m := w.writable(i, j)
		if had {
			w.unref(old)
		} else {
			w.next.n++
		}
		m[a.TenantID] = w.ref(a.Plan)
		ch.Set++
	}
	return w.done(t, ch)
}

// Delete returns t without the assignments of ids, at the next version if
// any was there; else t itself. t does not change.
func (t *Table) Delete(ids []string) (*Table, Changes) {
	w := newWriter(t, 0)
	var ch Changes
	for _, id := range ids {
		i, j := w.next.slot(id)
		old, had := w.get(i, j, id)
		if !had {
			ch.Missing++
			continue
		}
		m := w.writable(i, j)
		delete(m, id)
		if len(m) == 0 {
			w.next.root[i][j] = nil // a table that shrank holds no more than one built at its size
		}
		w.unref(old)
		w.next.n--
		ch.Deleted++
	}
	return w.done(t, ch)
}

// writer builds the next table, copying each part of t it writes to once
// (the root, a middle array, a map): those it made are its own.
type writer struct {
	next      *Table
	own       bool                // the root and every part below it are the writer's (a rebuild)
	ownRoot   bool                // the root is a copy
	ownMids   map[uint64]struct{} // copied middle arrays, by root slot
	ownLeaves map[uint64]struct{} // copied maps, by slot
	ownPlans  bool
}

// newWriter starts the next table; one that may grow to hold more than
// its shape serves well is rebuilt in a larger one first.
func newWriter(t *Table, adding int) *writer {
	next := &Table{plans: map[string]planCount{}}
	if t != nil {
		*next = *t
	}
	w := &writer{next: next, ownMids: map[uint64]struct{}{}, ownLeaves: map[uint64]struct{}{}}
	if next.root == nil {
		next.shape = shapeFor(adding)
	} else if next.n+adding > rebuildAt<<next.bits {
		w.rebuild(shapeFor(next.n + adding))
	}
	return w
}

// rebuild moves every assignment to a table of shape s, all of it the
// writer's own.
func (w *writer) rebuild(s shape) {
	old := *w.next
	w.next.shape, w.next.root, w.own = s, nil, true
	old.Range(func(id, plan string) bool {
		i, j := s.slot(id)
		w.writable(i, j)[id] = plan
		return true
	})
}

func (w *writer) get(i, j uint64, id string) (string, bool) {
	if w.next.root == nil || w.next.root[i] == nil {
		return "", false
	}
	p, ok := w.next.root[i][j][id]
	return p, ok
}

// writable returns map (i, j) of the next table, copied on its first write.
func (w *writer) writable(i, j uint64) map[string]string {
	t := w.next
	if t.root == nil {
		t.root, w.ownRoot = make([]mid, 1<<(64-t.rootShift)), true
	}
	if !w.own && !w.ownRoot {
		t.root, w.ownRoot = slices.Clone(t.root), true
	}
	if _, ok := w.ownMids[i]; !w.own && !ok || t.root[i] == nil {
		if t.root[i] == nil {
			t.root[i] = make(mid, t.midMask+1)
		} else {
			t.root[i] = slices.Clone(t.root[i])
		}
		w.ownMids[i] = struct{}{}
	}
	k := i<<(t.rootShift-t.midShift) | j
	leaf := &t.root[i][j]
	if _, ok := w.ownLeaves[k]; !w.own && !ok || *leaf == nil {
		*leaf = cloneLeaf(*leaf)
		w.ownLeaves[k] = struct{}{}
	}
	return *leaf
}

func cloneLeaf(m map[string]string) map[string]string {
	if m == nil {
		return make(map[string]string, 1)
	}
	return maps.Clone(m)
}

// ref counts one more tenant on plan p and returns the shared copy of its
// name.
func (w *writer) ref(p string) string {
	w.copyPlans()
	c, ok := w.next.plans[p]
	if !ok {
		c.name = p
	}
	c.n++
	w.next.plans[c.name] = c
	return c.name
}

func (w *writer) unref(p string) {
	w.copyPlans()
	c := w.next.plans[p]
	if c.n--; c.n <= 0 {
		delete(w.next.plans, p)
		return
	}
	w.next.plans[p] = c
}

func (w *writer) copyPlans() {
	if !w.ownPlans {
		w.next.plans = maps.Clone(w.next.plans)
		w.ownPlans = true
	}
}

func (w *writer) done(t *Table, ch Changes) (*Table, Changes) {
	if !ch.Changed() {
		return t, ch
	}
	w.next.version++
	return w.next, ch
}

// WithVersion returns a copy of t at version v: a restored table takes
// the version its snapshot recorded.
func (t *Table) WithVersion(v uint64) *Table {
	c := &Table{plans: map[string]planCount{}}
	if t != nil {
		*c = *t
	}
	c.version = v
	return c
}
