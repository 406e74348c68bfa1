package policy

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// ChangeFrom is Change over prev's set: the same snapshot, set, changes
// and errors, but built from prev. It compiles only the added and changed
// policies (and those that extend them), and updates prev's index and
// conflict groups for those alone, copying only the shards they touch:
// prev stays valid for the readers that hold it. It recompiles the whole
// set where that is as cheap or it must: with prune, other blocks, a
// change of most of the set, or a nil prev.
func ChangeFrom(prev *Snapshot, incoming []Policy, prune bool, now time.Time, blocks []Block, version uint64) (*Snapshot, []*Policy, Changes, error) {
	if prev == nil || prune || len(incoming) > len(prev.ps)/2 || !sameBlocks(prev.blocks, blocks) ||
		len(prev.entries) > 2*len(prev.ps)+len(prev.blocks)+1024 { // mostly removed slots: compact
		var ps []*Policy
		if prev != nil {
			ps = prev.ps
		}
		return Change(ps, incoming, prune, now, blocks, version)
	}
	s, next, ch, err := prev.change(incoming, now, version)
	return s, next, ch, invalid(err)
}

func sameBlocks(compiled, blocks []Block) bool {
	blocks = slices.Clone(blocks)
	slices.SortFunc(blocks, func(a, b Block) int { return strings.Compare(a.ID, b.ID) })
	return len(compiled) == len(blocks) && (len(blocks) == 0 || reflect.DeepEqual(compiled, blocks))
}

func (s *Snapshot) change(incoming []Policy, now time.Time, version uint64) (*Snapshot, []*Policy, Changes, error) {
	upd, ch, err := s.classify(incoming, now)
	if err != nil {
		return nil, nil, Changes{}, err
	}
	next := mergeSorted(s.ps, upd)
	n := s.fork(next, version)
	if len(upd) == 0 {
		return n, next, ch, nil
	}
	n.relink(s, upd)
	dirty := n.descendants(upd)
	entries, err := n.compileDirty(dirty)
	if err != nil {
		return nil, nil, Changes{}, err
	}
	n.replace(dirty, entries)
	if errs := n.checkConflicts(entries); len(errs) > 0 {
		return nil, nil, Changes{}, joinErrs(errs)
	}
	return n, next, ch, nil
}

// classify is merge's bookkeeping without the set: the added and changed
// policies (UpdatedAt set, each a copy of its own), sorted by id, and the
// changes.
func (s *Snapshot) classify(incoming []Policy, now time.Time) ([]*Policy, Changes, error) {
	in := make(map[string]int, len(incoming))
	for i := range incoming {
		if j, ok := in[incoming[i].ID]; ok {
			return nil, Changes{}, dupErr(&incoming[i], &incoming[j])
		}
		in[incoming[i].ID] = i
	}
	var ch Changes
	var upd []*Policy
	for _, p := range incoming {
		old, ok := s.Policy(p.ID)
		switch {
		case !ok:
			p.UpdatedAt = now
			ch.Added = append(ch.Added, p.ID)
		case same(old, &p):
			ch.Unchanged = append(ch.Unchanged, p.ID)
			continue
		default:
			p.UpdatedAt = now
			ch.Changed = append(ch.Changed, p.ID)
		}
		upd = append(upd, &p)
	}
	slices.SortFunc(upd, cmpID)
	ch.sort()
	return upd, ch, nil
}

// mergeSorted is ps with upd's policies replacing or joining those of
// their ids; both are sorted by id, and so is the result.
func mergeSorted(ps, upd []*Policy) []*Policy {
	out := make([]*Policy, 0, len(ps)+len(upd))
	i := 0
	for _, p := range upd {
		j, found := slices.BinarySearchFunc(ps[i:], p.ID, cmpPolicyID)
		out = append(out, ps[i:i+j]...)
		out = append(out, p)
		i += j
		if found {
			i++
		}
	}
	return append(out, ps[i:]...)
}

func cmpPolicyID(p *Policy, id string) int { return strings.Compare(p.ID, id) }

// fork is a copy of s over the set next that shares every index with s
// until it writes one.
func (s *Snapshot) fork(next []*Policy, version uint64) *Snapshot {
	n := *s
	n.version, n.ps, n.extractor = version, next, nil
	n.byID = s.byID.fork()
	n.entries = slices.Clone(s.entries) // ~1 ms at 300k: a change writes removed slots
	for d, m := range s.exact {
		if m != nil {
			n.exact[d] = m.fork()
		}
	}
	n.custom = make(map[string]*cowMap[string, []int32], len(s.custom))
	for k, m := range s.custom {
		n.custom[k] = m.fork()
	}
	n.customKeys = slices.Clip(s.customKeys)
	n.ips = s.ips.fork()
	n.groups = maps.Clone(s.groups)
	for k, g := range s.groups {
		n.groups[k] = g.fork()
	}
	return &n
}

// relink updates children for upd's extends; prev is the set before.
func (n *Snapshot) relink(prev *Snapshot, upd []*Policy) {
	cloned := false
	for _, p := range upd {
		was := ""
		if old, ok := prev.Policy(p.ID); ok {
			was = old.Extends
		}
		if was == p.Extends {
			continue
		}
		if !cloned {
			n.children, cloned = maps.Clone(n.children), true
		}
		if was != "" {
			n.children[was] = slices.DeleteFunc(slices.Clone(n.children[was]), func(id string) bool { return id == p.ID })
			if len(n.children[was]) == 0 {
				delete(n.children, was)
			}
		}
		if p.Extends != "" {
			n.children[p.Extends] = append(slices.Clip(n.children[p.Extends]), p.ID)
		}
	}
}

// descendants is upd's ids and every policy that extends one of them,
// however indirectly, sorted: what a change must recompile.
func (n *Snapshot) descendants(upd []*Policy) []string {
	seen := make(map[string]bool, len(upd))
	var queue []string
	for _, p := range upd {
		seen[p.ID] = true
		queue = append(queue, p.ID)
	}
	for k := 0; k < len(queue); k++ {
		for _, c := range n.children[queue[k]] {
			if !seen[c] {
				seen[c] = true
				queue = append(queue, c)
			}
		}
	}
	sort.Strings(queue)
	return queue
}

// policyOf finds id in the set by binary search (the index still holds
// the slots of the set before).
func (n *Snapshot) policyOf(id string) (*Policy, bool) {
	i, ok := slices.BinarySearchFunc(n.ps, id, cmpPolicyID)
	if !ok {
		return nil, false
	}
	return n.ps[i], true
}

// compileDirty compiles the dirty policies as build does.
func (n *Snapshot) compileDirty(dirty []string) ([]*entry, error) {
	var errs []error
	entries := make([]*entry, 0, len(dirty))
	whys := map[groupKey]string{}
	for _, id := range dirty {
		if len(errs) > maxErrors {
			break
		}
		p, _ := n.policyOf(id)
		eff, err := effective(p, n.policyOf)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e, perrs := compilePolicy(eff)
		e.p = p
		e.why = selectedWhy(whys, e)
		errs = append(errs, perrs...)
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return nil, joinErrs(errs)
	}
	return entries, nil
}

// replace takes the dirty ids' old entries out of the index and the
// conflict groups and files the new ones under new slots.
func (n *Snapshot) replace(dirty []string, entries []*entry) {
	for _, id := range dirty {
		i, ok := n.byID.get(id)
		if !ok {
			continue
		}
		old := n.entries[i]
		n.unindex(i, indexCond(old))
		if competes(old) {
			n.groups[groupKey{old.layer, old.kind, old.prio}].remove(old)
		}
		n.entries[i] = nil
	}
	for _, e := range entries {
		i := int32(len(n.entries))
		n.entries = append(n.entries, e)
		n.byID.set(e.id, i)
		n.index(i, indexCond(e), true)
	}
	if !slices.IsSorted(n.customKeys) {
		n.customKeys = slices.Clone(n.customKeys)
		sort.Strings(n.customKeys)
	}
}

// unindex takes slot i out of the lists of c's values, writing new lists.
func (n *Snapshot) unindex(i int32, c *cond) {
	del := func(list []int32) []int32 {
		return slices.DeleteFunc(slices.Clone(list), func(j int32) bool { return j == i })
	}
	switch {
	case c == nil:
		n.residual = del(n.residual)
	case c.ref.d == dIP:
		for _, p := range c.pats {
			l, _ := n.ips.get(p.cidr.Addr())
			setOrDel(n.ips, p.cidr.Addr(), del(l))
		}
	default:
		m := n.valueMap(c.ref)
		for _, p := range c.pats {
			l, _ := m.get(p.s)
			setOrDel(m, p.s, del(l))
		}
	}
}

func setOrDel[K comparable, V any](m *cowMap[K, []V], k K, l []V) {
	if len(l) == 0 {
		m.del(k)
		return
	}
	m.set(k, l)
}

// checkConflicts compares the new entries with the groups, as conflicts
// does the whole set: the set before had none, so every conflict has a new
// entry in it, and each is reported on the later id of the two.
func (n *Snapshot) checkConflicts(entries []*entry) []error {
	type found struct {
		later string
		err   error
	}
	var out []found
	for _, e := range entries {
		if !competes(e) {
			continue
		}
		k := groupKey{e.layer, e.kind, e.prio}
		g := n.groups[k]
		if g == nil {
			g = newGroup(0)
			n.groups[k] = g
		}
		g.check(e, func(o *entry) {
			if o.id < e.id {
				out = append(out, found{e.id, conflictErr(e, o)})
			} else {
				out = append(out, found{o.id, conflictErr(o, e)})
			}
		})
		g.add(e, true)
	}
	slices.SortStableFunc(out, func(a, b found) int { return strings.Compare(a.later, b.later) })
	errs := make([]error, 0, len(out))
	for _, f := range out {
		errs = append(errs, f.err)
	}
	return errs
}

// DiffOf is Diff of prev's set and next's for the changes ch between them
// (as ChangeFrom reports them), reading only the policies ch names.
func DiffOf(prev, next *Snapshot, ch Changes) string {
	var lines []string
	for _, id := range ch.Added {
		lines = append(lines, "+ "+id)
	}
	for _, id := range ch.Changed {
		old, _ := prev.Policy(id)
		p, _ := next.Policy(id)
		lines = append(lines, "~ "+id+": "+fieldDiff(old, p))
	}
	for _, id := range ch.Removed {
		lines = append(lines, "- "+id)
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][2:] < lines[j][2:] })
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
