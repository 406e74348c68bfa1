package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy/extract"
	"github.com/quorate/quorate/policy/tenants"
)

// Snapshot is an immutable, indexed, compiled policy set: safe for
// concurrent Resolve. Build a new one for every change and swap it in.
type Snapshot struct {
	version uint64
	ps      []*Policy              // sorted by id; shared, never modified
	byID    *cowMap[string, int32] // the policy's slot in entries
	// entries are slots: a policy's or block's compiled form; nil where a
	// change removed one (a change adds new slots, so the index's posting
	// lists of the others stay valid).
	entries []*entry
	blocks  []Block // as compiled, sorted by id
	// Each entry is indexed under one descriptor it requires an exact value
	// of (or an exact ip address); the rest are scanned.
	exact      [numDescs]*cowMap[string, []int32]
	customKeys []string // sorted, so Resolve visits in a fixed order
	custom     map[string]*cowMap[string, []int32]
	ips        *cowMap[netip.Addr, []int32]
	residual   []int32
	// groups is the conflict check's index, kept for the next change.
	groups map[groupKey]*group
	// children lists, by parent id, the policies that extend it.
	children map[string][]string
	// extractor reads descriptors from HTTP requests (nil: the defaults).
	extractor *extract.Extractor
	// tenants gives tiers to requests without one (assign.go).
	tenants    *tenants.Table
	tierSource TierSource
}

// Compile validates the document ps, compiles it and the blocks, and
// indexes them. The snapshot keeps ps's policies: do not modify them
// afterwards.
func Compile(ps []Policy, blocks []Block, version uint64) (*Snapshot, error) {
	return CompileSet(SetOf(ps), blocks, version)
}

// CompileSet is Compile of a set as ApplySet returns it. The snapshot
// keeps ps, copied only if it is not sorted by id (ApplySet's result is).
func CompileSet(ps []*Policy, blocks []Block, version uint64) (*Snapshot, error) {
	s, err := compile(ps, blocks, version)
	return s, invalid(err)
}

func compile(ps []*Policy, blocks []Block, version uint64) (*Snapshot, error) {
	entries, groups, err := build(ps)
	if err != nil {
		return nil, err
	}
	// Entries in id order let Resolve list matches by id without sorting strings.
	if !slices.IsSortedFunc(ps, cmpID) {
		ps = sortedByID(ps)
		slices.SortFunc(entries, func(a, b *entry) int { return strings.Compare(a.id, b.id) })
	}
	s := &Snapshot{version: version, ps: ps, byID: newStringMap[int32](len(ps)), custom: map[string]*cowMap[string, []int32]{},
		ips: newCOWMap[netip.Addr, []int32](hashAddr, 0), groups: groups, children: map[string][]string{}}
	for i := range ps {
		s.byID.set(ps[i].ID, int32(i))
		if ps[i].Extends != "" {
			s.children[ps[i].Extends] = append(s.children[ps[i].Extends], ps[i].ID)
		}
	}
	blocks = slices.Clone(blocks)
	slices.SortFunc(blocks, func(a, b Block) int { return strings.Compare(a.ID, b.ID) })
	var errs []error
	for i := range blocks {
		e, err := compileBlock(&blocks[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return nil, joinErrs(errs)
	}
	s.entries, s.blocks = entries, blocks
	s.indexAll()
	return s, nil
}

func compileBlock(b *Block) (*entry, error) {
	if !validName(b.ID, MaxNameLen) {
		return nil, fmt.Errorf("policy: block %q: block_id: want 1..%d of [a-z0-9_.-]", b.ID, MaxNameLen)
	}
	if len(b.Scope) == 0 {
		return nil, fmt.Errorf("policy: block %s: scope: empty (a block must name what it blocks)", b.ID)
	}
	if b.ExpiresAt.IsZero() {
		return nil, fmt.Errorf("policy: block %s: expires_at: required (a block is for an incident, not for good)", b.ID)
	}
	scope := make(map[string]Patterns, len(b.Scope))
	for k, v := range b.Scope {
		scope[k] = Patterns{v}
	}
	var errs []error
	conds := compileScope(scope, func(path string, err error) {
		errs = append(errs, fmt.Errorf("policy: block %s: %s: %w", b.ID, path, err))
	})
	if len(errs) > 0 {
		return nil, joinErrs(errs)
	}
	return &entry{block: b, id: b.ID, kind: KindBlock, enabled: true, conds: conds}, nil
}

// indexPreference: the most selective descriptors first.
var indexPreference = []desc{dTenantID, dAPIKeyID, dUserID, dRoute, dTenantTier, dService, dRegion}

// indexCond picks the condition an entry is indexed under: the first
// standard descriptor, then custom one, with exact values, then single ip
// addresses; nil for the residual list.
func indexCond(e *entry) *cond {
	for _, d := range indexPreference {
		if c := findCond(e.conds, d); c != nil {
			if _, ok := c.exacts(); ok {
				return c
			}
		}
	}
	for i := range e.conds {
		if _, ok := e.conds[i].exacts(); ok && e.conds[i].ref.d == dCustom {
			return &e.conds[i]
		}
	}
	if c := findCond(e.conds, dIP); c != nil && singleAddrs(c) {
		return c
	}
	return nil
}

// indexAll sizes the maps first: growing a 200k-entry map costs more than filling it.
func (s *Snapshot) indexAll() {
	conds := make([]*cond, len(s.entries))
	var counts [numDescs]int
	for i, e := range s.entries {
		if conds[i] = indexCond(e); conds[i] != nil && conds[i].ref.d < numDescs {
			counts[conds[i].ref.d] += len(conds[i].pats)
		}
	}
	for d, n := range counts {
		if n > 0 && d != int(dIP) {
			s.exact[d] = newStringMap[[]int32](n)
		}
	}
	for i, c := range conds {
		s.index(int32(i), c, false)
	}
	sort.Strings(s.customKeys)
}

// index files slot i under c's values. With clip, every list it changes is
// a new one: the lists may be shared with an older snapshot.
func (s *Snapshot) index(i int32, c *cond, clip bool) {
	add := func(list []int32) []int32 {
		if clip {
			list = slices.Clip(list)
		}
		return appendOnce(list, i)
	}
	switch {
	case c == nil:
		s.residual = add(s.residual)
	case c.ref.d == dIP:
		for _, p := range c.pats {
			l, _ := s.ips.get(p.cidr.Addr())
			s.ips.set(p.cidr.Addr(), add(l))
		}
	default:
		m := s.valueMap(c.ref)
		for _, p := range c.pats {
			l, _ := m.get(p.s)
			m.set(p.s, add(l))
		}
	}
}

// valueMap is the map of ref's values, created on first use.
func (s *Snapshot) valueMap(ref descRef) *cowMap[string, []int32] {
	if ref.d != dCustom {
		if s.exact[ref.d] == nil {
			s.exact[ref.d] = newStringMap[[]int32](0)
		}
		return s.exact[ref.d]
	}
	m := s.custom[ref.name]
	if m == nil {
		m = newStringMap[[]int32](0)
		s.custom[ref.name] = m
		s.customKeys = append(s.customKeys, ref.name)
	}
	return m
}

// appendOnce files entry i under a value once, however many of its
// patterns name the value ([t1, t1], or 10.0.0.1 and 10.0.0.1/32): visited
// twice, a shadow or soft policy would be applied, and charged, twice.
// Entries are indexed in order, so a repeat is the list's last element.
func appendOnce(list []int32, i int32) []int32 {
	if n := len(list); n > 0 && list[n-1] == i {
		return list
	}
	return append(list, i)
}

func findCond(conds []cond, d desc) *cond {
	for i := range conds {
		if conds[i].ref.d == d {
			return &conds[i]
		}
	}
	return nil
}

func singleAddrs(c *cond) bool {
	for _, p := range c.pats {
		if p.kind != patCIDR || !p.cidr.IsSingleIP() {
			return false
		}
	}
	return true
}

// WithExtractor returns a snapshot of the same policies that extracts with
// x (nil: the defaults). s is not changed: a snapshot is immutable, and the
// copy shares its (immutable) indexes.
func (s *Snapshot) WithExtractor(x *extract.Extractor) *Snapshot {
	c := *s
	c.extractor = x
	return &c
}

// Extractor is how the set reads descriptors from HTTP requests: the set's
// extraction, or the default. Never nil.
func (s *Snapshot) Extractor() *extract.Extractor {
	if s == nil || s.extractor == nil {
		return extract.Default()
	}
	return s.extractor
}

// Version is the policy set's version, as given to Compile.
func (s *Snapshot) Version() uint64 { return s.version }

// Len is the number of policies (blocks not counted).
func (s *Snapshot) Len() int { return len(s.ps) }

// Policy returns a policy as written, for explain and get. Do not modify it.
func (s *Snapshot) Policy(id string) (*Policy, bool) {
	if s == nil {
		return nil, false
	}
	i, ok := s.byID.get(id)
	if !ok {
		return nil, false
	}
	return s.entries[i].p, true
}

// LayerKind is the layer and kind policy id resolves with: as written, or
// inferred from its key and scope where it says none.
func (s *Snapshot) LayerKind(id string) (Layer, Kind, bool) {
	i, ok := s.byID.get(id)
	if !ok {
		return 0, 0, false
	}
	return s.entries[i].layer, s.entries[i].kind, true
}

// Policies returns the set as written, sorted by id. Do not modify it or
// its policies.
func (s *Snapshot) Policies() []*Policy { return s.ps }

// Resolution is what applies to one request.
type Resolution struct {
	// Block is non-nil when an active emergency block matched: deny, and
	// charge nothing.
	Block *Block
	// BlockPolicy is the id of a kind-BLOCK policy that matched (then Block is nil).
	BlockPolicy string
	// Applied are the selected policies, one per layer in layer order
	// (GLOBAL..CUSTOM), then the shadow ones (by layer, then id).
	Applied []Evaluation
	// Matched is every policy whose scope matched, selected or not, by id.
	Matched []Match

	items []Item // Applied's items, kept for reuse by DecideInto
}

// Evaluation is one policy to evaluate for the request.
type Evaluation struct {
	PolicyID    string
	Layer       Layer
	Kind        Kind
	Mode        Mode // the policy's, or THROTTLE when the request's risk band throttles
	Consistency Consistency
	Fail        FailBehavior
	// EmergencyCap is nil unless FAIL_OPEN with emergency_cap (a token
	// bucket). Shared by every resolution: do not modify it.
	EmergencyCap *fsm.Limit
	// Items are one per limit or quota level; the request passes only if all allow.
	Items []Item
	// RiskCut is the cut applied to every item's limit (0 if none).
	RiskCut float64
	// Remembers says the cut depends on the risk memory, not on the
	// request and the snapshot alone: the same request may be cut
	// differently later.
	Remembers bool
}

// Item is one bucket to charge.
type Item struct {
	// Name is the bucket name: the policy id, or policy id + "/" + the limit
	// or level name. Stable across edits, so a changed limit keeps its counts.
	Name string
	// Key is the key descriptors' values joined with "\x1f" in key order
	// (empty for a global key).
	Key string
	// Limit is after the risk cut.
	Limit fsm.Limit
	// Cost is the request's cost (>= 1).
	Cost int64
	// IdempotencyKey is api_key_id + "\x1f" + idempotency_key + "\x1f" +
	// route in dedupe mode when the request has an idempotency key; else "".
	IdempotencyKey string
	// Level is the limit or level name ("" for a single-limit policy).
	Level string
	// Delay is set when the bucket throttles (Evaluation.Mode THROTTLE,
	// or a SOFT policy's friction): Limit is then its shaper, and Delay
	// turns the shaper's answer into the request's wait.
	Delay Delay
}

// Match explains one policy whose scope matched.
type Match struct {
	PolicyID string
	Selected bool
	Why      string
	// Layer and Kind are what the policy resolves with; LayerFrom and
	// KindFrom say where each comes from: "written", or what it was
	// inferred from ("inferred from key tenant_id").
	Layer     Layer
	Kind      Kind
	LayerFrom string
	KindFrom  string
}

// Resolve finds what applies to r at time now (now only decides block
// expiry). It looks up the policies indexed under r's values and scans only
// those without an exact matcher.
func (s *Snapshot) Resolve(r *Request, now time.Time) Resolution {
	return s.resolve(r, now, true)
}

// Decide is Resolve without Matched: what a check needs, without the
// explanations only explain shows (they cost a string per match).
func (s *Snapshot) Decide(r *Request, now time.Time) Resolution {
	var res Resolution
	s.DecideInto(r, now, &res)
	return res
}

// DecideInto is Decide reusing res's memory: with a Resolution kept per
// worker (a sync.Pool), deciding allocates nothing but multi-descriptor
// keys. What res held before is overwritten.
func (s *Snapshot) DecideInto(r *Request, now time.Time, res *Resolution) {
	*res = s.resolveInto(r, now, false, res.Applied[:0], res.items[:0])
}

func (s *Snapshot) resolve(r *Request, now time.Time, explain bool) Resolution {
	return s.resolveInto(r, now, explain, nil, nil)
}

func (s *Snapshot) resolveInto(r *Request, now time.Time, explain bool, evs []Evaluation, items []Item) Resolution {
	rs := resolver{s: s, r: r, now: now, evs: evs, items: items}
	rs.tier, _, _ = s.assignedTier(r)
	var buf [16]hit
	hits := buf[:0]
	for l := range rs.best {
		rs.best[l] = -1
	}
	rs.blockAt = -1
	if r.IP != "" {
		rs.addr, _ = netip.ParseAddr(r.IP)
		rs.addr = rs.addr.Unmap()
	}
	for d := desc(0); d < numDescs; d++ {
		if m := s.exact[d]; m != nil {
			if v := rs.value(descRef{d: d}); v != "" {
				l, _ := m.get(v)
				hits = rs.visitAll(l, hits)
			}
		}
	}
	for _, name := range s.customKeys {
		if v := r.Custom[name]; v != "" {
			l, _ := s.custom[name].get(v)
			hits = rs.visitAll(l, hits)
		}
	}
	if rs.addr.IsValid() && s.ips.n > 0 {
		l, _ := s.ips.get(rs.addr)
		hits = rs.visitAll(l, hits)
	}
	hits = rs.visitAll(s.residual, hits)
	return rs.result(hits, explain)
}
