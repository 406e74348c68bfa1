package policy

import (
	"fmt"
	"slices"
	"strings"
)

// Validate checks a whole set: each policy (with extends applied) and the
// conflicts between them: duplicate ids, missing or cyclic extends, and two
// enabled, enforcing policies of one layer, kind and priority whose scopes
// can match the same request. Every message names both policies.
func Validate(ps []Policy) error {
	_, _, err := build(SetOf(ps))
	return invalid(err)
}

// build validates ps and compiles every policy; it returns the conflict
// index too, which a snapshot keeps for its next change.
func build(ps []*Policy) ([]*entry, map[groupKey]*group, error) {
	var errs []error
	byID := make(map[string]int, len(ps))
	for i := range ps {
		if j, ok := byID[ps[i].ID]; ok {
			errs = append(errs, dupErr(ps[i], ps[j]))
			continue
		}
		byID[ps[i].ID] = i
	}
	entries := make([]*entry, 0, len(ps))
	whys := map[groupKey]string{} // shared: 200k overrides have one
	for i := range ps {
		if len(errs) > maxErrors {
			break
		}
		eff, err := effective(ps[i], func(id string) (*Policy, bool) {
			j, ok := byID[id]
			if !ok {
				return nil, false
			}
			return ps[j], true
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e, perrs := compilePolicy(eff)
		e.p = ps[i]
		e.why = selectedWhy(whys, e)
		errs = append(errs, perrs...)
		entries = append(entries, e)
	}
	var groups map[groupKey]*group
	if len(errs) == 0 {
		groups, errs, _ = conflictIndex(entries)
	}
	if len(errs) > 0 {
		return nil, nil, joinErrs(errs)
	}
	return entries, groups, nil
}

func selectedWhy(whys map[groupKey]string, e *entry) string {
	k := groupKey{e.layer, e.kind, e.prio}
	w, ok := whys[k]
	if !ok {
		w = fmt.Sprintf("selected: best in layer %s (kind %s, priority %d)", e.layer, e.kind, e.prio)
		whys[k] = w
	}
	return w
}

func dupErr(p, first *Policy) error {
	also := ""
	if first.src != nil {
		also = " (also at " + strings.TrimSuffix(first.src.at(""), ": ") + ")"
	}
	return fmt.Errorf("%spolicy %s: duplicate policy_id%s", p.src.at(""), p.ID, also)
}

// where names a second policy in a message, with its position if it has one.
func where(p *Policy) string {
	if p.src == nil {
		return "policy " + p.ID
	}
	return "policy " + p.ID + " (" + strings.TrimSuffix(p.src.at(""), ": ") + ")"
}

// effective is p with what it extends copied into its unset fields; get
// finds a policy of the set by id.
func effective(p *Policy, get func(string) (*Policy, bool)) (*Policy, error) {
	if p.Extends == "" {
		return p, nil
	}
	chain := []string{p.ID}
	eff := *p
	for cur := p; cur.Extends != ""; {
		parent, ok := get(cur.Extends)
		if !ok {
			return nil, fmt.Errorf("%spolicy %s: extends: policy %s does not exist", cur.src.at("extends"), cur.ID, cur.Extends)
		}
		chain = append(chain, parent.ID)
		if parent.ID == p.ID || len(chain) > maxExtendsDepth {
			return nil, fmt.Errorf("%spolicy %s: extends cycle: %s", p.src.at("extends"), p.ID, strings.Join(chain, " -> "))
		}
		inherit(&eff, parent)
		cur = parent
	}
	eff.Extends = ""
	return &eff, nil
}

// inherit copies parent's fields into p's unset ones. The limit forms
// travel together: a child that writes any of them replaces all of them.
func inherit(p, parent *Policy) {
	p.Description = or(p.Description, parent.Description)
	p.Layer = or(p.Layer, parent.Layer)
	p.Kind = or(p.Kind, parent.Kind)
	if len(p.Scope) == 0 {
		p.Scope = parent.Scope
	}
	if len(p.Key) == 0 && !p.Shared {
		p.Key, p.Shared = parent.Key, parent.Shared
	}
	if p.Algorithm == "" && p.Config == nil && len(p.Limits) == 0 && len(p.QuotaTree) == 0 {
		p.Algorithm, p.Config, p.Limits, p.QuotaTree = parent.Algorithm, parent.Config, parent.Limits, parent.QuotaTree
	} else if len(p.Limits) == 0 && len(p.QuotaTree) == 0 && len(parent.Limits) == 0 && len(parent.QuotaTree) == 0 {
		p.Algorithm = or(p.Algorithm, parent.Algorithm)
		if p.Config == nil {
			p.Config = parent.Config
		}
	}
	p.Mode = or(p.Mode, parent.Mode)
	p.Consistency = or(p.Consistency, parent.Consistency)
	p.FailBehavior = or(p.FailBehavior, parent.FailBehavior)
	p.EmergencyCap = or(p.EmergencyCap, parent.EmergencyCap)
	p.Priority = or(p.Priority, parent.Priority)
	if p.Risk == nil {
		p.Risk = parent.Risk
	}
	if p.Idempotency == nil {
		p.Idempotency = parent.Idempotency
	}
	if p.Throttle == nil {
		p.Throttle = parent.Throttle
	}
}

// groupKey: only policies that agree on all three can conflict.
type groupKey struct {
	layer Layer
	kind  Kind
	prio  int
}

type pivotKey struct {
	desc string
	v    string
}

// group indexes one (layer, kind, priority) group's policies by their pivot:
// the first descriptor they constrain to exact values. Only candidates found
// through it are compared, so 200k tenant overrides cost 200k lookups.
type group struct {
	byValue *cowMap[pivotKey, []*entry]
	// byDesc holds, by pivot descriptor, every entry filed under one of
	// its values: what a policy without exact values there is compared
	// with. Sets, not lists: a change adds or removes one entry of 300k
	// without copying the rest.
	byDesc   map[string]*cowMap[*entry, struct{}]
	residual []*entry
	hint     int // entries expected, to size a new byDesc set
}

// conflicts also returns how many pairs it compared, which tests bound.
func conflicts(entries []*entry) (errs []error, compared int) {
	_, errs, compared = conflictIndex(entries)
	return errs, compared
}

// conflictIndex is conflicts, returning the groups it built too.
func conflictIndex(entries []*entry) (groups map[groupKey]*group, errs []error, compared int) {
	sizes := map[groupKey]int{} // sizes first: growing a 200k-entry map costs more than filling it
	for _, e := range entries {
		if competes(e) {
			sizes[groupKey{e.layer, e.kind, e.prio}]++
		}
	}
	groups = make(map[groupKey]*group, len(sizes))
	for k, n := range sizes {
		groups[k] = newGroup(n)
	}
	for _, e := range entries {
		if !competes(e) {
			continue
		}
		g := groups[groupKey{e.layer, e.kind, e.prio}]
		compared += g.check(e, func(o *entry) {
			if len(errs) <= maxErrors {
				errs = append(errs, conflictErr(e, o))
			}
		})
		g.add(e, false)
	}
	return groups, errs, compared
}

func newGroup(n int) *group {
	return &group{byValue: newCOWMap[pivotKey, []*entry](hashPivot, n), byDesc: map[string]*cowMap[*entry, struct{}]{}, hint: n}
}

// competes: only enabled, enforcing, non-block policies are selected within a layer.
func competes(e *entry) bool {
	return e.enabled && e.mode != Shadow && e.kind != KindBlock
}

func conflictErr(e, o *entry) error {
	return fmt.Errorf("%spolicy %s: conflicts with %s: both are layer %s, kind %s, priority %d and their scopes can match the same request (give one a different priority or make the scopes disjoint)",
		e.p.src.at("scope"), e.id, where(o.p), e.layer, e.kind, e.prio)
}

func pivot(e *entry) (string, []string) {
	for i := range e.conds {
		if vals, ok := e.conds[i].exacts(); ok {
			return e.conds[i].ref.String(), vals
		}
	}
	return "", nil
}

// add files e in g. With clip, every list it changes is a new one: the
// lists may be shared with an older snapshot's group.
func (g *group) add(e *entry, clip bool) {
	add := func(list []*entry) []*entry {
		if clip {
			list = slices.Clip(list)
		}
		return append(list, e)
	}
	d, vals := pivot(e)
	if d == "" {
		g.residual = add(g.residual)
		return
	}
	all := g.byDesc[d]
	if all == nil {
		all = newCOWMap[*entry, struct{}](hashEntry, g.hint)
		g.byDesc[d] = all
	}
	all.set(e, struct{}{})
	for _, v := range vals {
		l, _ := g.byValue.get(pivotKey{d, v})
		g.byValue.set(pivotKey{d, v}, add(l))
	}
}

// remove takes e out of g, writing only new lists.
func (g *group) remove(e *entry) {
	del := func(list []*entry) []*entry {
		return slices.DeleteFunc(slices.Clone(list), func(o *entry) bool { return o == e })
	}
	d, vals := pivot(e)
	if d == "" {
		g.residual = del(g.residual)
		return
	}
	g.byDesc[d].del(e)
	for _, v := range vals {
		k := pivotKey{d, v}
		l, _ := g.byValue.get(k)
		if l = del(l); len(l) > 0 {
			g.byValue.set(k, l)
		} else {
			g.byValue.del(k)
		}
	}
}

// fork is a copy of g that shares its lists until it changes them.
func (g *group) fork() *group {
	f := &group{byValue: g.byValue.fork(), byDesc: make(map[string]*cowMap[*entry, struct{}], len(g.byDesc)), residual: g.residual}
	for d, all := range g.byDesc {
		f.byDesc[d] = all.fork()
	}
	return f
}

func (g *group) check(e *entry, conflict func(*entry)) (compared int) {
	var seen map[*entry]bool // a set-valued pivot can list o twice
	try := func(o *entry) {
		if seen[o] {
			return
		}
		if compared++; overlap(e, o) {
			conflict(o)
		}
		if seen == nil {
			seen = map[*entry]bool{}
		}
		seen[o] = true
	}
	for _, o := range g.residual {
		try(o)
	}
	for d, all := range g.byDesc {
		c := e.cond(d)
		vals, exact := []string(nil), false
		if c != nil {
			vals, exact = c.exacts()
		}
		if !exact {
			all.each(func(o *entry, _ struct{}) { try(o) })
			continue
		}
		for _, v := range vals {
			l, _ := g.byValue.get(pivotKey{d, v})
			for _, o := range l {
				try(o)
			}
		}
	}
	return compared
}

func (e *entry) cond(name string) *cond {
	for i := range e.conds {
		if e.conds[i].ref.String() == name {
			return &e.conds[i]
		}
	}
	return nil
}

var present = []pattern{{kind: patAny}}

// overlap reports whether some request can match both: every descriptor
// both constrain (a key descriptor must be present) must overlap.
func overlap(a, b *entry) bool {
	ca, cb := a.overlapConds(), b.overlapConds()
	for i := range ca {
		for j := range cb {
			if ca[i].ref == cb[j].ref && !ca[i].overlaps(&cb[j]) {
				return false
			}
		}
	}
	return true
}

// overlapConds is the scope plus "present" for each key descriptor.
func (e *entry) overlapConds() []cond {
	out := e.conds
	for _, k := range e.keys {
		out = append(out[:len(out):len(out)], cond{ref: k, pats: present})
	}
	return out
}
