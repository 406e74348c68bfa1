package policy

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

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
	shared    bool // one bucket on purpose (shared: true, or its parent's)
	rollout   *rollout
	throttle  *throttleSpec // nil: the policy has no throttle section
	why       string        // the Match.Why when selected
	// layerInferred and kindInferred: the policy wrote no layer or kind
	// (explain says what they were inferred from).
	layerInferred, kindInferred bool
}

// rollout is a compiled Rollout: a subject is enforced when the hash of
// the policy id and its by values, mod rolloutScale, is below share.
type rollout struct {
	share   uint64
	by      []descRef
	percent string // for explain
}

// rolloutScale: percents to 4 decimals.
const rolloutScale = 1_000_000

type itemSpec struct {
	name, level string
	key         []descRef
	limit       fsm.Limit
}

type risk struct {
	bands  []band // highest first
	floor  int64
	maxCut float64
	exempt []exemption
	memory *riskMemory
}

// band applies to scores above at, or at it too unless strict; with
// throttle, its requests are throttled instead of denied.
type band struct {
	at       float64
	strict   bool
	cut      float64
	throttle bool
}

func (b band) holds(score float64) bool { return score > b.at || !b.strict && score == b.at }

type riskMemory struct {
	halfLife time.Duration
	by       []descRef
}

// Bounds of risk memory's half-life: long enough to matter, short enough
// that a node's memory of a subject fades within a day.
const (
	minHalfLife = time.Second
	maxHalfLife = 24 * time.Hour
)

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
	e := &entry{p: p, id: p.ID, layer: p.Layer, kind: p.Kind, prio: p.Priority, enabled: p.IsEnabled(), shared: p.Shared}
	e.mode, e.cons, e.fail = or(p.Mode, Hard), or(p.Consistency, Strict), or(p.FailBehavior, FailOpen)
	c.enums(p)
	e.conds = compileScope(p.Scope, func(path string, err error) { c.fail(path, "%v", err) })
	c.limits(e, partial)
	c.emergencyCap(e)
	e.risk = c.risk(p.Risk, e)
	c.idempotency(e)
	e.rollout = c.rollout(e)
	c.throttle(e, partial)
	if partial {
		return e
	}
	if e.layer == 0 {
		e.layer, _ = inferLayer(e)
		e.layerInferred = true
	}
	if e.kind == 0 {
		e.kind, _ = inferKind(e.conds)
		e.kindInferred = true
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
	if p.Shared && len(key) > 0 {
		c.fail("shared", "shared: true is one bucket for every request the scope matches; a key counts separately (write one of them)")
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

func (c *checker) risk(r *Risk, e *entry) *risk {
	if r == nil {
		return nil
	}
	if len(r.Bands) == 0 || len(r.Bands) > maxBands {
		c.fail("risk.bands", "want 1..%d bands", maxBands)
	}
	out := &risk{floor: r.Floor, maxCut: r.MaxCut}
	for i, b := range r.Bands {
		path := fmt.Sprintf("risk.bands[%d]", i)
		cb := band{at: b.Min, cut: b.Cut}
		if b.Above != nil {
			if b.Min != 0 {
				c.fail(path, "write min (at or above) or above (strictly above), not both")
			}
			cb.at, cb.strict = *b.Above, true
		}
		if field := ".min"; !(cb.at >= 0 && cb.at <= 1) {
			if cb.strict {
				field = ".above"
			}
			c.fail(path+field, "%v: want 0 to 1", cb.at)
		}
		if !(b.Cut >= 0 && b.Cut < 1) {
			c.fail(path+".cut", "%v: want 0 <= cut < 1 (a cut of 1 would deny everything: use kind BLOCK)", b.Cut)
		}
		c.checkAction(path+".action", b.Action)
		cb.throttle = b.Action == actionThrottle
		out.bands = append(out.bands, cb)
	}
	// Highest first; at one threshold, "above" before "at or above".
	sort.SliceStable(out.bands, func(i, j int) bool {
		a, b := out.bands[i], out.bands[j]
		return a.at > b.at || a.at == b.at && a.strict && !b.strict
	})
	if !(r.MaxCut >= 0 && r.MaxCut < 1) {
		c.fail("risk.max_cut", "%v: want 0 <= max_cut < 1 (0: the bands' cuts unbounded)", r.MaxCut)
	}
	out.memory = c.riskMemory(r.Memory, e)
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

func (c *checker) riskMemory(m *RiskMemory, e *entry) *riskMemory {
	if m == nil {
		return nil
	}
	out := &riskMemory{by: c.keys("risk.memory.by", m.By)}
	d, err := time.ParseDuration(m.HalfLife)
	switch {
	case err != nil:
		c.fail("risk.memory.half_life", "%q: want a duration like 10m", m.HalfLife)
	case d < minHalfLife || d > maxHalfLife:
		c.fail("risk.memory.half_life", "%v: want %v to %v", d, minHalfLife, maxHalfLife)
	}
	out.halfLife = d
	if len(out.by) == 0 && len(e.items) > 0 {
		out.by = e.items[0].key
	}
	if len(out.by) == 0 {
		c.fail("risk.memory.by", "the policy has no key to remember a subject by: name the descriptors, e.g. by: [ip]")
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

func (c *checker) rollout(e *entry) *rollout {
	r := c.p.Rollout
	if r == nil {
		return nil
	}
	if !(r.Percent >= 0 && r.Percent <= 100) {
		c.fail("rollout.percent", "%v: want 0 to 100", r.Percent)
	}
	switch {
	case c.p.Kind == KindBlock:
		c.fail("rollout", "a BLOCK policy denies every request it matches: it cannot be rolled out by subject")
		return nil
	case e.mode == Shadow:
		c.fail("rollout", "a SHADOW policy never enforces: roll out a HARD or SOFT one")
		return nil
	}
	out := &rollout{share: uint64(math.Round(r.Percent * rolloutScale / 100)), by: c.keys("rollout.by", r.By),
		percent: strconv.FormatFloat(r.Percent, 'f', -1, 64) + "%"}
	if len(out.by) == 0 && len(e.items) > 0 {
		out.by = e.items[0].key
	}
	if len(out.by) == 0 {
		c.fail("rollout.by", "the policy has no key to pick subjects by: name the descriptors, e.g. by: [tenant_id]")
	}
	return out
}

// inferLayer: the most specific descriptor the first limit counts by, which
// it returns too ("" for none).
func inferLayer(e *entry) (Layer, string) {
	var key []descRef
	if len(e.items) > 0 {
		key = e.items[0].key
	}
	for _, l := range []struct {
		d desc
		l Layer
	}{{dIP, IP}, {dUserID, User}, {dAPIKeyID, APIKey}, {dRoute, Route}, {dTenantID, Tenant}, {dCustom, Custom}} {
		if i := slices.IndexFunc(key, func(r descRef) bool { return r.d == l.d }); i >= 0 {
			return l.l, key[i].String()
		}
	}
	return Global, ""
}

// inferKind reads the order from the scope: an exact subject is an
// override, a tier a plan, a route an adjustment, no API key a fallback.
// It returns the scope field that decided ("" for none).
func inferKind(conds []cond) (Kind, string) {
	for _, d := range []desc{dTenantID, dAPIKeyID, dUserID} {
		if c := findCond(conds, d); c != nil && len(c.pats) == 1 && c.pats[0].kind == patExact {
			return Override, "an exact scope." + descNames[d]
		}
	}
	switch {
	case findCond(conds, dTenantTier) != nil:
		return Plan, "scope.tenant_tier"
	case findCond(conds, dRoute) != nil:
		return RouteAdjustment, "scope.route"
	}
	if c := findCond(conds, dAPIKeyID); c != nil && len(c.pats) == 1 && c.pats[0].kind == patAbsent {
		return Fallback, "scope.api_key_id absent"
	}
	return Default, ""
}

// layerFrom says where e's layer comes from, for explain and warnings.
func (e *entry) layerFrom() string {
	if !e.layerInferred {
		return "written"
	}
	if _, d := inferLayer(e); d != "" {
		return "inferred from key " + d
	}
	return "inferred: no key"
}

// kindFrom says where e's kind comes from.
func (e *entry) kindFrom() string {
	if !e.kindInferred {
		return "written"
	}
	if _, f := inferKind(e.conds); f != "" {
		return "inferred from " + f
	}
	return "inferred: no subject, tier or route in the scope"
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
