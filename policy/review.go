package policy

import (
	"fmt"
	"slices"
	"strings"
)

// MaxWarnings bounds what Review says: a document of 200k policies could
// otherwise make a warning per policy.
const MaxWarnings = 50

// Review is what an apply says of a document beyond its validity, against
// the set s it changes (nil: an empty set). It refuses a policy the
// document adds or changes that would not do what it looks like it does:
// no key while its scope selects many subjects (one bucket shared by all of
// them), or LEASED with idempotency dedupe (a leased check cannot
// deduplicate). A policy the set holds unchanged is warned about instead,
// so a set stored before these rules keeps applying. It warns too of a
// route-scoped policy whose layer was inferred as another, a policy that
// can never decide because another of its layer always wins, and a LEASED
// policy whose algorithm cannot be leased.
//
// It runs where a write enters the cluster, not in the replicated state
// machine, which validates alone: replaying an old log must give the set it
// gave. The document is validated elsewhere; Review skips what does not
// compile.
func (s *Snapshot) Review(doc []Policy, prune bool) (warnings []string, err error) {
	r := reviewer{s: s, doc: map[string]*entry{}}
	var errs []error
	for _, e := range r.compileDoc(doc) {
		for _, f := range r.policyFindings(e) {
			if f.refuse && r.changed(e) {
				errs = append(errs, f.err(e))
			} else {
				r.warn(f.text(e, r.changed(e)))
			}
		}
	}
	if len(errs) > 0 {
		return nil, invalid(joinErrs(errs))
	}
	r.rivals(prune)
	if r.more > 0 {
		r.warnings = append(r.warnings, fmt.Sprintf("(%d more warnings not shown)", r.more))
	}
	return r.warnings, nil
}

type reviewer struct {
	s        *Snapshot
	doc      map[string]*entry
	order    []*entry // doc's entries, in document order
	warnings []string
	more     int
}

type finding struct {
	refuse bool
	path   string // the field the position points at
	msg    string
}

func (f finding) err(e *entry) error {
	return fmt.Errorf("%spolicy %s: %s", e.p.src.at(f.path), e.id, f.msg)
}

func (f finding) text(e *entry, changed bool) string {
	if f.refuse && !changed {
		return "policy " + e.id + " (in the set from before quorate refused this, and kept as it is): " + f.msg
	}
	return "policy " + e.id + ": " + f.msg
}

func (r *reviewer) warn(w string) {
	if len(r.warnings) >= MaxWarnings {
		r.more++
		return
	}
	r.warnings = append(r.warnings, w)
}

// compileDoc compiles the document's policies with extends resolved
// against the document, then the set.
func (r *reviewer) compileDoc(doc []Policy) []*entry {
	byID := make(map[string]*Policy, len(doc))
	for i := range doc {
		byID[doc[i].ID] = &doc[i]
	}
	get := func(id string) (*Policy, bool) {
		if p, ok := byID[id]; ok {
			return p, true
		}
		return r.s.Policy(id)
	}
	for i := range doc {
		e := r.stored(&doc[i])
		if e == nil {
			eff, err := effective(&doc[i], get)
			if err != nil {
				continue
			}
			var errs []error
			if e, errs = compilePolicy(eff); len(errs) > 0 {
				continue
			}
		}
		if r.doc[e.id] != nil {
			continue
		}
		e.p = &doc[i]
		r.doc[e.id] = e
		r.order = append(r.order, e)
	}
	return r.order
}

// stored is a copy of the set's compiled p when the set holds p as it is
// and p extends nothing: re-applying a whole file compiles only what
// changed. nil otherwise.
func (r *reviewer) stored(p *Policy) *entry {
	if r.s == nil || p.Extends != "" {
		return nil
	}
	i, ok := r.s.byID.get(p.ID)
	if !ok || r.s.entries[i] == nil || !same(r.s.entries[i].p, p) {
		return nil
	}
	e := *r.s.entries[i]
	return &e
}

// changed: the document adds e, or says something else of it than the set.
func (r *reviewer) changed(e *entry) bool {
	if r.s == nil {
		return true
	}
	old, ok := r.s.Policy(e.id)
	return !ok || !same(old, e.p)
}

// policyFindings are what one policy says on its own.
func (r *reviewer) policyFindings(e *entry) []finding {
	var out []finding
	if f, ok := keylessClass(e); ok {
		out = append(out, f)
	}
	if e.cons == Leased && e.dedupe {
		out = append(out, finding{true, "idempotency", "consistency LEASED with idempotency dedupe: a retry is recognised only at the shard, " +
			"so a leased check cannot deduplicate it and would be decided as STRICT; write consistency: STRICT to deduplicate retries, " +
			"or idempotency: { mode: charge } to keep it leased and charge every attempt"})
	}
	if e.cons == Leased {
		for _, it := range e.items {
			if !it.limit.Algorithm.Leasable() {
				alg := strings.ToUpper(it.limit.Algorithm.String())
				out = append(out, finding{false, "consistency", fmt.Sprintf("consistency LEASED, but %s cannot be leased (it needs every decision in order): "+
					"its checks are decided at the shard, as STRICT; write consistency: STRICT to say so, or an algorithm that leases (SLIDING_WINDOW)", alg)})
				break
			}
		}
	}
	return out
}

// classDescs identify subjects: a scope that matches many of their values
// selects a class of subjects (a tier selects tenants).
var classDescs = []desc{dTenantTier, dTenantID, dAPIKeyID, dUserID, dIP}

// keylessClass: a policy without a key whose scope selects many subjects
// would be one bucket shared by all of them, which is rarely meant.
func keylessClass(e *entry) (finding, bool) {
	if len(e.keys) > 0 || e.kind == KindBlock || len(e.items) == 0 || e.shared {
		return finding{}, false
	}
	for _, d := range classDescs {
		c := findCond(e.conds, d)
		if c == nil || !manyValues(c) {
			continue
		}
		per := map[desc]string{
			dTenantTier: "key: [tenant_id] for a bucket per tenant, key: [tenant_id, api_key_id] for one per tenant and API key",
			dTenantID:   "key: [tenant_id] for a bucket per tenant, key: [tenant_id, api_key_id] for one per tenant and API key",
			dAPIKeyID:   "key: [api_key_id] for a bucket per API key",
			dUserID:     "key: [user_id] for a bucket per user",
			dIP:         "key: [ip] for a bucket per address",
		}[d]
		return finding{true, "scope." + descNames[d], fmt.Sprintf("no key, and scope.%s matches many %s: they would all share ONE bucket; "+
			"write %s, or shared: true for one bucket on purpose", descNames[d], subjects(d), per)}, true
	}
	return finding{}, false
}

func subjects(d desc) string {
	switch d {
	case dTenantTier, dTenantID:
		return "tenants"
	case dAPIKeyID:
		return "API keys"
	case dUserID:
		return "users"
	}
	return "addresses"
}

// manyValues: c matches more than one present value.
func manyValues(c *cond) bool {
	if c.ref.d == dTenantTier { // one tier has many tenants
		return slices.ContainsFunc(c.pats, func(p pattern) bool { return p.kind != patAbsent })
	}
	n := 0
	for _, p := range c.pats {
		switch {
		case p.kind == patAny || p.kind == patPrefix:
			return true
		case p.kind == patCIDR && !p.cidr.IsSingleIP():
			return true
		case p.kind != patAbsent:
			n++
		}
	}
	return n > 1
}

// rivals warns of the layer clashes the document makes: a route-scoped
// policy whose layer was inferred as another (it then competes with that
// layer's plans and overrides), and a policy that can never decide because
// another of its layer wins wherever it matches. A route-scoped policy the
// set holds is warned about too when a document policy wins over it.
//
// A policy that covers another has an exact value wherever that one does,
// so the candidates are found through indexes: the snapshot's for the set,
// the conflict check's pivots for the document. Only a route-scoped policy
// is compared with every policy of its layer, while warnings have room.
func (r *reviewer) rivals(prune bool) {
	set := r.s
	if prune {
		set = nil // nothing the document does not name stays
	}
	groups := map[Layer]*group{}
	for _, e := range r.order {
		if competes(e) {
			g := groups[e.layer]
			if g == nil {
				g = newGroup(0)
				groups[e.layer] = g
			}
			g.add(e, false)
		}
	}
	routedSet := map[Layer][]*entry{}
	if set != nil {
		for _, o := range set.entries {
			if o != nil && routed(o) && r.fromSet(o) {
				routedSet[o.layer] = append(routedSet[o.layer], o)
			}
		}
	}
	victims := map[*entry][]*entry{}
	for _, e := range r.order {
		if !competes(e) {
			continue
		}
		var never *entry
		var winners []*entry
		consider := func(o *entry) {
			if o.layer == e.layer && o.id != e.id && better(o, e) && covers(o, e) && (never == nil || better(o, never)) {
				never = o
			}
		}
		groups[e.layer].coverCandidates(e, consider)
		if set != nil {
			set.coverCandidates(e, func(o *entry) {
				if r.fromSet(o) {
					consider(o)
				}
			})
			for _, o := range routedSet[e.layer] {
				if better(e, o) && overlapping(e, o) {
					victims[o] = append(victims[o], e)
				}
			}
		}
		if routed(e) && never == nil && len(r.warnings) < MaxWarnings {
			winners = r.winners(e, groups[e.layer], set)
		}
		r.clash(e, winners, never)
	}
	for _, o := range sortedEntries(victims) {
		r.clash(o, victims[o], nil)
	}
}

// fromSet: a policy of the set that stays and competes in its layer.
func (r *reviewer) fromSet(o *entry) bool {
	return o.block == nil && r.doc[o.id] == nil && competes(o)
}

// routed: scoped by route, and in another layer than ROUTE by inference.
func routed(e *entry) bool {
	return e.kind == RouteAdjustment && e.layerInferred && e.layer != Route
}

// winners are the policies of e's layer that win over it where both match.
func (r *reviewer) winners(e *entry, g *group, set *Snapshot) []*entry {
	var out []*entry
	g.check(e, func(o *entry) {
		if o.id != e.id && better(o, e) {
			out = append(out, o)
		}
	})
	if set != nil {
		for _, o := range set.entries {
			if o != nil && o.layer == e.layer && better(o, e) && r.fromSet(o) && overlapping(o, e) {
				out = append(out, o)
			}
		}
	}
	return out
}

// coverCandidates calls f with every document policy that could cover e:
// those without an exact value, and those filed under one of e's.
func (g *group) coverCandidates(e *entry, f func(*entry)) {
	if g == nil {
		return
	}
	for _, o := range g.residual {
		f(o)
	}
	for i := range e.conds {
		if vals, ok := e.conds[i].exacts(); ok {
			l, _ := g.byValue.get(pivotKey{e.conds[i].ref.String(), vals[0]})
			for _, o := range l {
				f(o)
			}
		}
	}
}

// coverCandidates calls f with every policy of s that could cover e, by
// the index Resolve uses: those it scans, and those filed under one of e's
// exact values or addresses.
func (s *Snapshot) coverCandidates(e *entry, f func(*entry)) {
	each := func(l []int32) {
		for _, j := range l {
			if s.entries[j] != nil {
				f(s.entries[j])
			}
		}
	}
	each(s.residual)
	for i := range e.conds {
		c := &e.conds[i]
		vals, ok := c.exacts()
		var l []int32
		switch {
		case ok && c.ref.d == dCustom && s.custom[c.ref.name] != nil:
			l, _ = s.custom[c.ref.name].get(vals[0])
		case ok && c.ref.d != dCustom && s.exact[c.ref.d] != nil:
			l, _ = s.exact[c.ref.d].get(vals[0])
		case c.ref.d == dIP && singleAddrs(c) && s.ips != nil:
			l, _ = s.ips.get(c.pats[0].cidr.Addr())
		}
		each(l)
	}
}

// clash warns of e, given the policies of its layer that win over it where
// both match and one that covers it (nil if none is known).
func (r *reviewer) clash(e *entry, winners []*entry, never *entry) {
	var best *entry
	for _, w := range winners {
		if best == nil || better(w, best) {
			best = w
		}
		if covers(w, e) && (never == nil || better(w, never)) {
			never = w
		}
	}
	routed := routed(e)
	fix := fmt.Sprintf("write layer: ROUTE to apply it beside them, or layer: %s to keep this", e.layer)
	switch {
	case never != nil:
		msg := fmt.Sprintf("can never decide: wherever it matches, policy %s matches too and wins layer %s (%s); ", never.id, e.layer, beats(never, e))
		if routed {
			msg += fmt.Sprintf("its layer was %s: %s", e.layerFrom(), fix)
		} else {
			msg += "give it another layer, kind or priority, or remove it"
		}
		r.warn("policy " + e.id + " " + msg)
	case routed && best != nil:
		r.warn(fmt.Sprintf("policy %s: scoped by route, but its layer is %s, %s: policy %s wins layer %s over it (%s) wherever both match%s; %s",
			e.id, e.layer, e.layerFrom(), best.id, e.layer, beats(best, e), others(len(winners)-1), fix))
	case routed && r.doc[e.id] == e:
		r.warn(fmt.Sprintf("policy %s: scoped by route, but its layer is %s, %s: a PLAN or OVERRIDE of layer %s matching the same request would win over it; %s",
			e.id, e.layer, e.layerFrom(), e.layer, fix))
	}
}

func others(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d more)", n)
}

// beats says why w wins over e in their layer.
func beats(w, e *entry) string {
	switch {
	case w.kind != e.kind:
		return w.kind.String() + " beats " + e.kind.String()
	case w.prio != e.prio:
		return "priority " + itoa(w.prio) + " beats " + itoa(e.prio)
	}
	return "same kind and priority, lower id"
}

func sortedEntries(m map[*entry][]*entry) []*entry {
	out := make([]*entry, 0, len(m))
	for e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.id, b.id) })
	return out
}

// overlapping is overlap without allocating: a key descriptor, which must
// be present, clashes only with a scope that wants it absent.
func overlapping(a, b *entry) bool {
	for i := range a.conds {
		for j := range b.conds {
			if a.conds[i].ref == b.conds[j].ref && !a.conds[i].overlaps(&b.conds[j]) {
				return false
			}
		}
	}
	return keysCanBePresent(a, b) && keysCanBePresent(b, a)
}

func keysCanBePresent(a, b *entry) bool {
	for _, k := range a.keys {
		for i := range b.conds {
			c := &b.conds[i]
			if c.ref == k && !slices.ContainsFunc(c.pats, func(p pattern) bool { return p.kind != patAbsent }) {
				return false
			}
		}
	}
	return true
}

// covers reports whether o matches every request e matches and can count
// it (o's key descriptors are present): then e never decides where o
// wins. A key descriptor counts as a condition "present".
func covers(o, e *entry) bool {
	for i := range o.conds {
		oc := &o.conds[i]
		if !slices.ContainsFunc(e.conds, func(c cond) bool { return c.ref == oc.ref && c.within(oc) }) &&
			!(slices.Contains(e.keys, oc.ref) && slices.ContainsFunc(oc.pats, func(p pattern) bool { return p.kind == patAny })) {
			return false
		}
	}
	for _, k := range o.keys {
		if !slices.Contains(e.keys, k) && !slices.ContainsFunc(e.conds, func(c cond) bool { return c.ref == k && c.within(&presentCond) }) {
			return false
		}
	}
	return true
}

var presentCond = cond{pats: present}

// within: every value c matches, o matches.
func (c *cond) within(o *cond) bool {
	for i := range c.pats {
		if !slices.ContainsFunc(o.pats, func(q pattern) bool { return c.pats[i].within(&q) }) {
			return false
		}
	}
	return true
}

func (p *pattern) within(q *pattern) bool {
	switch q.kind {
	case patAny:
		return p.kind != patAbsent
	case patAbsent:
		return p.kind == patAbsent
	case patExact:
		return p.kind == patExact && p.s == q.s
	case patPrefix:
		return (p.kind == patExact || p.kind == patPrefix) && strings.HasPrefix(p.s, q.s)
	case patCIDR:
		return p.kind == patCIDR && q.cidr.Bits() <= p.cidr.Bits() && q.cidr.Contains(p.cidr.Addr())
	}
	return false
}
