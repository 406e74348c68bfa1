package policy

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/quorate/quorate/fsm"
)

// entry is one policy (or block) compiled for matching.
type entry struct {
	p         *Policy // as written; nil for blocks
	block     *Block
	id        string
	layer     Layer
	kind      Kind
	mode      Mode
	cons      Consistency
	fail      FailBehavior
	prio      int
	enabled   bool
	conds     []cond
	keys      []descRef // every descriptor some item counts by: all must be present
	items     []itemSpec
	emergency *fsm.Limit
	risk      *risk
	dedupe    bool
	throttle  *throttleSpec // nil: the policy has no throttle section
	why       string        // the Match.Why when selected
}

type itemSpec struct {
	name, level string
	key         []descRef
	limit       fsm.Limit
}

type risk struct {
	bands  []Band // highest Min first
	floor  int64
	exempt []exemption
}

type exemption struct {
	ref descRef
	v   string
}

// checker collects one policy's errors with their positions.
type checker struct {
	p    *Policy
	errs []error
}

func (c *checker) at(path string) string { return c.p.src.at(path) }

func (c *checker) fail(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	c.errs = append(c.errs, fmt.Errorf("%spolicy %s: %s", c.at(path), c.p.ID, msg))
}

// checkFields checks what one policy says on its own, without what extends
// would add: the check Parse makes.
func checkFields(p *Policy) []error {
	c := &checker{p: p}
	c.compile(p.Extends != "")
	return c.errs
}

// compilePolicy builds the entry of an effective policy (extends applied).
func compilePolicy(p *Policy) (*entry, []error) {
	c := &checker{p: p}
	e := c.compile(false)
	return e, c.errs
}

func (c *checker) compile(partial bool) *entry {
	p := c.p
	if !validName(p.ID, MaxNameLen) {
		c.fail("policy_id", "%q: want 1..%d of [a-z0-9_.-]", p.ID, MaxNameLen)
	}
	e := &entry{p: p, id: p.ID, layer: p.Layer, kind: p.Kind, prio: p.Priority, enabled: p.IsEnabled()}
	e.mode, e.cons, e.fail = or(p.Mode, Hard), or(p.Consistency, Strict), or(p.FailBehavior, FailOpen)
	c.enums(p)
	e.conds = compileScope(p.Scope, func(path string, err error) { c.fail(path, "%v", err) })
	c.limits(e, partial)
	c.emergencyCap(e)
	e.risk = c.risk(p.Risk)
	c.idempotency(e)
	c.throttle(e, partial)
	if partial {
		return e
	}
	if e.layer == 0 {
		e.layer = inferLayer(e)
	}
	if e.kind == 0 {
		e.kind = inferKind(e.conds)
	}
	if e.kind == KindBlock && e.mode != Hard {
		c.fail("mode", "a BLOCK policy always denies: it cannot be %s", e.mode)
	}
	return e
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// enums catches values set from Go that the file format cannot express.
func (c *checker) enums(p *Policy) {
	if p.Layer >= numLayers {
		c.fail("layer", "unknown layer %d", p.Layer)
	}
	if p.Kind >= numKinds {
		c.fail("kind", "unknown kind %d", p.Kind)
	}
	if p.Mode > Throttle || p.Consistency > Leased || p.FailBehavior > FailClosed {
		c.fail("", "unknown mode, consistency or fail_behavior")
	}
}

func (c *checker) keys(path string, key []string) []descRef {
	if len(key) > maxKeyParts {
		c.fail(path, "%d descriptors, at most %d", len(key), maxKeyParts)
		return nil
	}
	refs := make([]descRef, 0, len(key))
	for i, k := range key {
		ref, err := lookupDesc(k)
		if err != nil {
			c.fail(fmt.Sprintf("%s[%d]", path, i), "%v", err)
			continue
		}
		if slices.Contains(refs, ref) {
			c.fail(fmt.Sprintf("%s[%d]", path, i), "%s written twice", k)
		}
		refs = append(refs, ref)
	}
	return refs
}

// limits compiles exactly one of algorithm+config, limits and quota_tree.
func (c *checker) limits(e *entry, partial bool) {
	p := c.p
	key := c.keys("key", p.Key)
	forms := 0
	if p.Algorithm != "" || p.Config != nil {
		forms++
		if !partial || (p.Algorithm != "" && p.Config != nil) {
			c.single(e, key)
		}
	}
	if len(p.Limits) > 0 {
		forms++
		c.named(e, key)
	}
	if len(p.QuotaTree) > 0 {
		forms++
		c.tree(e, key)
	}
	switch {
	case forms > 1:
		c.fail("", "write only one of algorithm+config, limits and quota_tree")
	case forms == 0 && !partial && p.Kind != KindBlock:
		c.fail("", "no limit: write algorithm+config, limits or quota_tree (or kind: BLOCK)")
	case forms == 1 && p.Kind == KindBlock && !partial:
		c.fail("kind", "a BLOCK policy always denies: it has no algorithm, config, limits or quota_tree")
	}
	for _, it := range e.items {
		for _, k := range it.key {
			if !slices.Contains(e.keys, k) {
				e.keys = append(e.keys, k)
			}
		}
	}
	if len(e.items) == 0 {
		e.keys = key
	}
}

// sub joins a field path: sub("", "config") is "config".
func sub(path, field string) string {
	if path == "" || field == "" {
		return path + field
	}
	return path + "." + field
}

func (c *checker) limit(path, alg string, cfg *Config) (fsm.Limit, bool) {
	if alg == "" {
		c.fail(sub(path, "algorithm"), "required (TOKEN_BUCKET, GCRA, SLIDING_WINDOW, FIXED_WINDOW, SLIDING_LOG, LEAKY_BUCKET_POLICING or LEAKY_BUCKET_SHAPING)")
		return fsm.Limit{}, false
	}
	a, err := parseAlgorithm(alg)
	if err != nil {
		c.fail(sub(path, "algorithm"), "%v", err)
		return fsm.Limit{}, false
	}
	if cfg == nil {
		c.fail(sub(path, "config"), "required with algorithm")
		return fsm.Limit{}, false
	}
	l, field, err := configLimit(a, cfg)
	if err != nil {
		c.fail(sub(sub(path, "config"), field), "%v", err)
		return l, false
	}
	return l, true
}

func (c *checker) single(e *entry, key []descRef) {
	if l, ok := c.limit("", c.p.Algorithm, c.p.Config); ok {
		e.items = append(e.items, itemSpec{name: c.p.ID, key: key, limit: l})
	}
}

func (c *checker) named(e *entry, key []descRef) {
	if len(c.p.Limits) > maxLimits {
		c.fail("limits", "%d limits, at most %d", len(c.p.Limits), maxLimits)
		return
	}
	for i, nl := range c.p.Limits {
		path := fmt.Sprintf("limits[%d]", i)
		c.itemName(e, path+".name", nl.Name)
		k := key
		if len(nl.Key) > 0 {
			k = c.keys(path+".key", nl.Key)
		}
		if l, ok := c.limit(path, nl.Algorithm, nl.Config); ok {
			e.items = append(e.items, itemSpec{name: c.p.ID + "/" + nl.Name, level: nl.Name, key: k, limit: l})
		}
	}
}

func (c *checker) tree(e *entry, key []descRef) {
	if len(c.p.QuotaTree) > maxLevels {
		c.fail("quota_tree", "%d levels, at most %d", len(c.p.QuotaTree), maxLevels)
		return
	}
	alg := ""
	for i, q := range c.p.QuotaTree {
		path := fmt.Sprintf("quota_tree[%d]", i)
		c.itemName(e, path+".level", q.Level)
		alg = or(q.Algorithm, alg)
		k := key
		if len(q.Key) > 0 {
			k = c.keys(path+".key", q.Key)
		}
		if l, ok := c.limit(path, alg, q.Config); ok {
			e.items = append(e.items, itemSpec{name: c.p.ID + "/" + q.Level, level: q.Level, key: k, limit: l})
		}
	}
}

// itemName checks a limit or level name: it names a bucket, so it is unique.
func (c *checker) itemName(e *entry, path, name string) {
	if !validLevel(name) {
		c.fail(path, "%q: want 1..64 of [A-Za-z0-9_.-]", name)
	}
	for _, it := range e.items {
		if it.level == name {
			c.fail(path, "%q written twice", name)
		}
	}
}

func validLevel(s string) bool {
	return validName(strings.ToLower(s), 64)
}

func (c *checker) emergencyCap(e *entry) {
	p := c.p
	if p.EmergencyCap == "" {
		return
	}
	if e.fail != FailOpen {
		c.fail("emergency_cap", "only with fail_behavior FAIL_OPEN (a closed policy denies while the shard cannot decide)")
		return
	}
	n, d, err := parseRate(p.EmergencyCap)
	if err != nil {
		c.fail("emergency_cap", "%v", err)
		return
	}
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: n, Period: d}
	if err := l.Validate(); err != nil {
		c.fail("emergency_cap", "%s", strings.TrimPrefix(err.Error(), "fsm: "))
		return
	}
	e.emergency = &l
}

func (c *checker) risk(r *Risk) *risk {
	if r == nil {
		return nil
	}
	if len(r.Bands) == 0 || len(r.Bands) > maxBands {
		c.fail("risk.bands", "want 1..%d bands", maxBands)
	}
	out := &risk{floor: r.Floor}
	for i, b := range r.Bands {
		path := fmt.Sprintf("risk.bands[%d]", i)
		if !(b.Min >= 0 && b.Min <= 1) {
			c.fail(path+".min", "%v: want 0 <= min <= 1", b.Min)
		}
		if !(b.Cut >= 0 && b.Cut < 1) {
			c.fail(path+".cut", "%v: want 0 <= cut < 1 (a cut of 1 would deny everything: use kind BLOCK)", b.Cut)
		}
		c.checkAction(path+".action", b.Action)
		out.bands = append(out.bands, b)
	}
	sort.SliceStable(out.bands, func(i, j int) bool { return out.bands[i].Min > out.bands[j].Min })
	if r.Floor < 0 {
		c.fail("risk.floor", "%d: want >= 0", r.Floor)
	}
	if len(r.Exempt) > maxExempt {
		c.fail("risk.exempt", "%d subjects, at most %d", len(r.Exempt), maxExempt)
	}
	for i, s := range r.Exempt {
		path := fmt.Sprintf("risk.exempt[%d]", i)
		name, v, ok := strings.Cut(s, "=")
		ref, err := lookupDesc(name)
		switch {
		case !ok || v == "":
			c.fail(path, "%q: want descriptor=value, like tenant_id=t_vip", s)
		case err != nil:
			c.fail(path, "%v", err)
		default:
			out.exempt = append(out.exempt, exemption{ref: ref, v: v})
		}
	}
	return out
}

func (c *checker) idempotency(e *entry) {
	id := c.p.Idempotency
	if id == nil {
		return
	}
	switch id.Mode {
	case "", "charge":
	case "dedupe":
		e.dedupe = true
	default:
		c.fail("idempotency.mode", "%q: want charge or dedupe", id.Mode)
	}
}

// inferLayer: the most specific descriptor the first limit counts by.
func inferLayer(e *entry) Layer {
	var key []descRef
	if len(e.items) > 0 {
		key = e.items[0].key
	}
	has := func(d desc) bool { return slices.ContainsFunc(key, func(r descRef) bool { return r.d == d }) }
	switch {
	case has(dIP):
		return IP
	case has(dUserID):
		return User
	case has(dAPIKeyID):
		return APIKey
	case has(dRoute):
		return Route
	case has(dTenantID):
		return Tenant
	case has(dCustom):
		return Custom
	}
	return Global
}

// inferKind reads the order from the scope: an exact subject is an
// override, a tier a plan, a route an adjustment, no API key a fallback.
func inferKind(conds []cond) Kind {
	find := func(d desc) *cond {
		for i := range conds {
			if conds[i].ref.d == d {
				return &conds[i]
			}
		}
		return nil
	}
	for _, d := range []desc{dTenantID, dAPIKeyID, dUserID} {
		if c := find(d); c != nil && len(c.pats) == 1 && c.pats[0].kind == patExact {
			return Override
		}
	}
	switch {
	case find(dTenantTier) != nil:
		return Plan
	case find(dRoute) != nil:
		return RouteAdjustment
	}
	if c := find(dAPIKeyID); c != nil && len(c.pats) == 1 && c.pats[0].kind == patAbsent {
		return Fallback
	}
	return Default
}

// cutLimit applies a risk cut: max(floor, ceil(x × (1 − cut))), never above x.
func cutLimit(l fsm.Limit, cut float64, floor int64) fsm.Limit {
	scale := func(x int64) int64 {
		v := max(floor, int64(math.Ceil(float64(x)*(1-cut))))
		return min(max(v, 1), x)
	}
	l.Limit = scale(l.Limit)
	if l.Burst > 0 {
		l.Burst = scale(l.Burst)
	}
	return l
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
