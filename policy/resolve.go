package policy

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
)

// hit is a policy whose scope matched the request.
type hit struct {
	i         int32
	state     hitState
	missing   descRef // for skipped
	rolledOut bool    // a shadow because its subject is outside the rollout
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
	ipKey   string
	tier    string       // the tier the tenant assignment gives the request ("": the request's own)
	items   []Item       // every evaluation's items, allocated once (or reused)
	evs     []Evaluation // reused by DecideInto
}

// visitAll appends the hits among is. The caller owns hits, so a request's
// bookkeeping can stay on its stack.
func (rs *resolver) visitAll(is []int32, hits []hit) []hit {
	for _, i := range is {
		if h, ok := rs.visit(i); ok {
			hits = append(hits, h)
		}
	}
	return hits
}

func (rs *resolver) matches(e *entry) bool {
	for i := range e.conds {
		c := &e.conds[i]
		if !c.match(rs.value(c.ref), rs.addr) {
			return false
		}
	}
	return true
}

func (rs *resolver) visit(i int32) (hit, bool) {
	e := rs.s.entries[i]
	if e.block != nil && !rs.now.Before(e.block.ExpiresAt) || !rs.matches(e) {
		return hit{}, false
	}
	if e.block != nil {
		rs.pickBlock(i)
		return hit{}, false
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
	case e.rollout != nil && !rs.enforced(e):
		h.state, h.rolledOut = hitShadow, true
	default:
		if b := rs.best[e.layer]; b < 0 || better(e, rs.s.entries[b]) {
			rs.best[e.layer] = i
		}
	}
	return h, true
}

func (rs *resolver) missingKey(e *entry, missing *descRef) bool {
	for _, k := range e.keys {
		if rs.value(k) == "" {
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

func (rs *resolver) result(hits []hit, explain bool) Resolution {
	var res Resolution
	if rs.blockAt >= 0 {
		b := rs.s.entries[rs.blockAt]
		res.Block = b.block
		if b.block == nil {
			res.BlockPolicy = b.id
		}
	} else {
		res.Applied = rs.applied(hits)
	}
	res.items = rs.items
	if explain {
		res.Matched = rs.explain(hits)
	}
	return res
}

func (rs *resolver) applied(hits []hit) []Evaluation {
	var buf [8]int32
	shadows := buf[:0]
	for _, h := range hits {
		if h.state == hitShadow {
			shadows = append(shadows, h.i)
		}
	}
	n := len(shadows)
	for _, b := range rs.best {
		if b >= 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	items := 0
	for _, b := range rs.best {
		if b >= 0 {
			items += len(rs.s.entries[b].items)
		}
	}
	for _, i := range shadows {
		items += len(rs.s.entries[i].items)
	}
	if cap(rs.items) < items {
		rs.items = make([]Item, 0, items)
	}
	out := rs.evs
	if cap(out) < n {
		out = make([]Evaluation, 0, n)
	}
	for _, b := range rs.best {
		if b >= 0 {
			out = append(out, rs.evaluate(rs.s.entries[b], rs.s.entries[b].mode))
		}
	}
	slices.SortFunc(shadows, func(i, j int32) int {
		a, b := rs.s.entries[i], rs.s.entries[j]
		return cmp.Or(cmp.Compare(a.layer, b.layer), strings.Compare(a.id, b.id))
	})
	for _, i := range shadows {
		// A policy whose rollout leaves this subject out is a shadow too.
		out = append(out, rs.evaluate(rs.s.entries[i], Shadow))
	}
	return out
}

// enforced reports whether the request's subject is among those e's
// rollout enforces. The hash is part of what a rollout means: the same
// subjects on every node, across restarts and versions.
func (rs *resolver) enforced(e *entry) bool {
	r := e.rollout
	var buf [256]byte
	b := append(buf[:0], e.id...)
	for _, ref := range r.by {
		v := rs.keyPart(ref)
		if v == "" {
			return false
		}
		b = append(append(b, 0x1f), v...)
	}
	return xxhash.Sum64(b)%rolloutScale < r.share
}

// evaluate is e's items for the request, decided in mode (e's, or Shadow);
// a shadow never throttles.
func (rs *resolver) evaluate(e *entry, mode Mode) Evaluation {
	ev := Evaluation{PolicyID: e.id, Layer: e.layer, Kind: e.kind, Mode: mode, Consistency: e.cons, Fail: e.fail, EmergencyCap: e.emergency}
	var bandThrottles bool
	ev.RiskCut, bandThrottles = rs.riskCut(e)
	if bandThrottles && mode == Hard {
		ev.Mode = Throttle
	}
	ev.Remembers = e.risk != nil && e.risk.memory != nil
	cost := max(rs.r.Cost, 1)
	idem := ""
	if e.dedupe && rs.r.IdempotencyKey != "" {
		idem = rs.r.APIKeyID + "\x1f" + rs.r.IdempotencyKey + "\x1f" + rs.r.Route
	}
	start := len(rs.items)
	for _, it := range e.items {
		l := it.limit
		if ev.RiskCut > 0 {
			l = cutLimit(l, ev.RiskCut, e.risk.floor)
		}
		l, delay := evalThrottle(e, ev.Mode, l)
		rs.items = append(rs.items, Item{Name: it.name, Key: rs.key(it.key), Limit: l, Cost: cost, IdempotencyKey: idem, Level: it.level, Delay: delay})
	}
	ev.Items = rs.items[start:len(rs.items):len(rs.items)]
	return ev
}

// riskCut is the cut of the request's band, and whether the band throttles.
func (rs *resolver) riskCut(e *entry) (float64, bool) {
	r := e.risk
	if r == nil {
		return 0, false
	}
	score, has := rs.r.RiskScore, rs.r.HasRisk
	if m := r.memory; m != nil && rs.r.Memory != nil {
		if subject := rs.subject(e.id, m.by); subject != "" {
			score, has = rs.r.Memory.Recall(subject, score, has, m.halfLife, rs.now)
		}
	}
	if !has {
		return 0, false
	}
	for _, x := range r.exempt {
		if rs.value(x.ref) == x.v {
			return 0, false
		}
	}
	for _, b := range r.bands {
		if b.holds(score) {
			if r.maxCut > 0 {
				return min(b.cut, r.maxCut), b.throttle
			}
			return b.cut, b.throttle
		}
	}
	return 0, false
}

// subject is a policy's id and the by descriptors' values, joined by
// 0x1f; "" if the request lacks one of them.
func (rs *resolver) subject(id string, by []descRef) string {
	var b strings.Builder
	b.WriteString(id)
	for _, ref := range by {
		v := rs.keyPart(ref)
		if v == "" {
			return ""
		}
		b.WriteByte(0x1f)
		b.WriteString(v)
	}
	return b.String()
}

// key joins the key descriptors' values; one descriptor costs no allocation.
func (rs *resolver) key(refs []descRef) string {
	switch len(refs) {
	case 0:
		return ""
	case 1:
		return rs.keyPart(refs[0])
	}
	n := len(refs) - 1
	for _, ref := range refs {
		n += len(rs.keyPart(ref))
	}
	var b strings.Builder
	b.Grow(n)
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
		return rs.value(ref)
	}
	if rs.ipKey == "" {
		var buf [64]byte
		if b := rs.addr.AppendTo(buf[:0]); string(b) == rs.r.IP {
			rs.ipKey = rs.r.IP // already canonical: no allocation
		} else {
			rs.ipKey = string(b)
		}
	}
	return rs.ipKey
}

func (rs *resolver) explain(hits []hit) []Match {
	if len(hits) == 0 {
		return nil
	}
	slices.SortFunc(hits, func(a, b hit) int { return strings.Compare(rs.s.entries[a.i].id, rs.s.entries[b.i].id) }) // a change's new slots are not in id order
	out := make([]Match, len(hits))
	for k, h := range hits {
		e := rs.s.entries[h.i]
		out[k] = Match{PolicyID: e.id, Why: rs.why(h, e), Layer: e.layer, Kind: e.kind, LayerFrom: e.layerFrom(), KindFrom: e.kindFrom()}
		out[k].Selected = h.state == hitEnforcing && rs.best[e.layer] == h.i && rs.blockAt < 0 ||
			h.state == hitBlock && rs.blockAt == h.i
	}
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
		if h.rolledOut {
			return "rollout: subject outside the " + e.rollout.percent + " enforced; evaluated as a shadow, never denies"
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
	if w == e && e.rollout != nil {
		return e.why + "; rollout: subject among the " + e.rollout.percent + " enforced"
	}
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
