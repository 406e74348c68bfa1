package policy

import (
	"net/netip"
	"sort"
	"strings"
	"time"
)

// hit is a policy whose scope matched the request.
type hit struct {
	i       int32
	state   hitState
	missing descRef // for skipped
}

type hitState uint8

const (
	hitEnforcing hitState = iota
	hitDisabled
	hitSkipped
	hitShadow
	hitBlock
)

// resolver is one Resolve call's state; it lives on the stack.
type resolver struct {
	s       *Snapshot
	r       *Request
	now     time.Time
	addr    netip.Addr
	best    [numLayers]int32
	blockAt int32
	hits    []hit
	shadows []int32
	ipKey   string
}

func (rs *resolver) visitAll(is []int32) {
	for _, i := range is {
		rs.visit(i)
	}
}

func (rs *resolver) matches(e *entry) bool {
	for i := range e.conds {
		c := &e.conds[i]
		if !c.match(rs.r.value(c.ref), rs.addr) {
			return false
		}
	}
	return true
}

func (rs *resolver) visit(i int32) {
	e := rs.s.entries[i]
	if e.block != nil && !rs.now.Before(e.block.ExpiresAt) || !rs.matches(e) {
		return
	}
	if e.block != nil {
		rs.pickBlock(i)
		return
	}
	h := hit{i: i}
	switch {
	case !e.enabled:
		h.state = hitDisabled
	case rs.missingKey(e, &h.missing):
		h.state = hitSkipped
	case e.kind == KindBlock:
		h.state = hitBlock
		rs.pickBlock(i)
	case e.mode == Shadow:
		h.state = hitShadow
		rs.shadows = append(rs.shadows, i)
	default:
		if b := rs.best[e.layer]; b < 0 || better(e, rs.s.entries[b]) {
			rs.best[e.layer] = i
		}
	}
	rs.hits = append(rs.hits, h)
}

func (rs *resolver) missingKey(e *entry, missing *descRef) bool {
	for _, k := range e.keys {
		if rs.r.value(k) == "" {
			*missing = k
			return true
		}
	}
	return false
}

// better: the lower kind, then the higher priority, then (for determinism) the lower id.
func better(a, b *entry) bool {
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.id < b.id
}

// pickBlock prefers an emergency block to a BLOCK policy, then the lower id.
func (rs *resolver) pickBlock(i int32) {
	if rs.blockAt < 0 {
		rs.blockAt = i
		return
	}
	a, b := rs.s.entries[i], rs.s.entries[rs.blockAt]
	if (a.block != nil) != (b.block != nil) {
		if a.block != nil {
			rs.blockAt = i
		}
		return
	}
	if a.id < b.id {
		rs.blockAt = i
	}
}

func (rs *resolver) result() Resolution {
	var res Resolution
	if rs.blockAt >= 0 {
		b := rs.s.entries[rs.blockAt]
		res.Block = b.block
		if b.block == nil {
			res.BlockPolicy = b.id
		}
	} else {
		res.Applied = rs.applied()
	}
	res.Matched = rs.explain()
	return res
}

func (rs *resolver) applied() []Evaluation {
	n := len(rs.shadows)
	for _, b := range rs.best {
		if b >= 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]Evaluation, 0, n)
	for _, b := range rs.best {
		if b >= 0 {
			out = append(out, rs.evaluate(rs.s.entries[b]))
		}
	}
	sort.Slice(rs.shadows, func(i, j int) bool {
		a, b := rs.s.entries[rs.shadows[i]], rs.s.entries[rs.shadows[j]]
		return a.layer < b.layer || a.layer == b.layer && a.id < b.id
	})
	for _, i := range rs.shadows {
		out = append(out, rs.evaluate(rs.s.entries[i]))
	}
	return out
}

func (rs *resolver) evaluate(e *entry) Evaluation {
	ev := Evaluation{PolicyID: e.id, Layer: e.layer, Kind: e.kind, Mode: e.mode, Consistency: e.cons, Fail: e.fail, EmergencyCap: e.emergency}
	ev.RiskCut = rs.riskCut(e.risk)
	cost := max(rs.r.Cost, 1)
	idem := ""
	if e.dedupe && rs.r.IdempotencyKey != "" {
		idem = rs.r.APIKeyID + "\x1f" + rs.r.IdempotencyKey + "\x1f" + rs.r.Route
	}
	ev.Items = make([]Item, len(e.items))
	for i, it := range e.items {
		l := it.limit
		if ev.RiskCut > 0 {
			l = cutLimit(l, ev.RiskCut, e.risk.floor)
		}
		ev.Items[i] = Item{Name: it.name, Key: rs.key(it.key), Limit: l, Cost: cost, IdempotencyKey: idem, Level: it.level}
	}
	return ev
}

func (rs *resolver) riskCut(r *risk) float64 {
	if r == nil || !rs.r.HasRisk {
		return 0
	}
	for _, x := range r.exempt {
		if rs.r.value(x.ref) == x.v {
			return 0
		}
	}
	for _, b := range r.bands {
		if rs.r.RiskScore >= b.Min {
			return b.Cut
		}
	}
	return 0
}

// key joins the key descriptors' values; one descriptor costs no allocation.
func (rs *resolver) key(refs []descRef) string {
	switch len(refs) {
	case 0:
		return ""
	case 1:
		return rs.keyPart(refs[0])
	}
	var b strings.Builder
	for i, ref := range refs {
		if i > 0 {
			b.WriteByte(0x1f)
		}
		b.WriteString(rs.keyPart(ref))
	}
	return b.String()
}

// keyPart writes an ip in canonical form, so "::1" and "0::1" share a bucket.
func (rs *resolver) keyPart(ref descRef) string {
	if ref.d != dIP || !rs.addr.IsValid() {
		return rs.r.value(ref)
	}
	if rs.ipKey == "" {
		rs.ipKey = rs.addr.String()
	}
	return rs.ipKey
}

func (rs *resolver) explain() []Match {
	if len(rs.hits) == 0 {
		return nil
	}
	out := make([]Match, len(rs.hits))
	for k, h := range rs.hits {
		e := rs.s.entries[h.i]
		out[k] = Match{PolicyID: e.id, Why: rs.why(h, e)}
		out[k].Selected = h.state == hitEnforcing && rs.best[e.layer] == h.i && rs.blockAt < 0 ||
			h.state == hitBlock && rs.blockAt == h.i
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PolicyID < out[j].PolicyID })
	return out
}

func (rs *resolver) why(h hit, e *entry) string {
	switch h.state {
	case hitDisabled:
		return "disabled"
	case hitSkipped:
		return "skipped: key descriptor " + h.missing.String() + " missing from the request"
	case hitShadow:
		if rs.blockAt >= 0 {
			return "not evaluated: " + rs.blockWhy()
		}
		return "shadow: evaluated, never denies"
	case hitBlock:
		if rs.blockAt == h.i {
			return "selected: BLOCK policy, denies"
		}
		return "not selected: " + rs.blockWhy()
	}
	if rs.blockAt >= 0 {
		return "not selected: " + rs.blockWhy()
	}
	w := rs.s.entries[rs.best[e.layer]]
	if w == e {
		return e.why
	}
	beats := w.kind.String() + " beats " + e.kind.String()
	if w.kind == e.kind {
		beats = "priority " + itoa(w.prio) + " beats " + itoa(e.prio)
		if w.prio == e.prio {
			beats = "same kind and priority, lower id"
		}
	}
	return "not selected: policy " + w.id + " wins layer " + e.layer.String() + " (" + beats + ")"
}

func (rs *resolver) blockWhy() string {
	b := rs.s.entries[rs.blockAt]
	if b.block != nil {
		return "emergency block " + b.id + " denies the request"
	}
	return "BLOCK policy " + b.id + " denies the request"
}
