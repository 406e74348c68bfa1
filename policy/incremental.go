package policy

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// ChangeFrom is Change over prev's set without the ids remove names
// (those it holds: Changes.Removed lists them): the same snapshot, set,
// changes and errors as the full compile, but built from prev. It
// compiles only the added and changed policies (and those that extend
// them or a removed one), and updates prev's index and conflict groups
// for those alone, copying only the shards they touch: prev stays valid
// for the readers that hold it. It recompiles the whole set where that is
// as cheap or it must: with prune, a change of most of the set, or a nil
// prev. Blocks that come or go are compiled and indexed alone.
func ChangeFrom(prev *Snapshot, incoming []Policy, remove []string, prune bool, now time.Time, blocks []Block, version uint64) (*Snapshot, []*Policy, Changes, error) {
	if prev == nil || prune || len(incoming)+len(remove) > len(prev.ps)/2 ||
		len(prev.entries) > 2*len(prev.ps)+len(prev.blocks)+1024 || // mostly removed slots: compact
		putsRemoved(incoming, remove) {
		var ps []*Policy
		if prev != nil {
			ps = prev.ps
		}
		from, removed := Without(ps, remove)
		s, next, ch, err := Change(from, incoming, prune, now, blocks, version)
		if err == nil && len(removed) > 0 {
			ch.Removed = slices.Compact(slices.Sorted(slices.Values(append(ch.Removed, removed...))))
		}
		return s, next, ch, err
	}
	s, next, ch, err := prev.change(incoming, remove, now, blocks, version)
	return s, next, ch, invalid(err)
}

// DeleteFrom is Delete over prev's set, built as ChangeFrom builds: an
// unknown id is an error naming it, and so is deleting a policy that a
// remaining one extends.
func DeleteFrom(prev *Snapshot, ids []string, now time.Time, blocks []Block, version uint64) (*Snapshot, []*Policy, Changes, error) {
	del := make(map[string]bool, len(ids))
	for _, id := range ids {
		if _, ok := prev.Policy(id); !ok {
			return nil, nil, Changes{}, kindError{fmt.Errorf("policy %s: no such policy", id), ErrNotFound}
		}
		del[id] = true
	}
	var orphan *Policy // the first by id, as Delete names it
	for id := range del {
		for _, c := range prev.children[id] {
			if p, _ := prev.Policy(c); !del[c] && (orphan == nil || c < orphan.ID) {
				orphan = p
			}
		}
	}
	if orphan != nil {
		return nil, nil, Changes{}, invalid(fmt.Errorf("policy %s: cannot delete it: policy %s extends it (delete or change %s too)", orphan.Extends, orphan.ID, orphan.ID))
	}
	return ChangeFrom(prev, nil, ids, false, now, blocks, version)
}

// putsRemoved reports whether a policy incoming puts is also removed: the
// full compile orders the two (remove, then put); the incremental path
// does not.
func putsRemoved(incoming []Policy, remove []string) bool {
	for i := range incoming {
		if slices.Contains(remove, incoming[i].ID) {
			return true
		}
	}
	return false
}

// Without is the set ps without the policies ids names, and the ids it
// held, sorted; ps is not modified.
func Without(ps []*Policy, ids []string) ([]*Policy, []string) {
	if len(ids) == 0 {
		return ps, nil
	}
	del := make(map[string]bool, len(ids))
	for _, id := range ids {
		del[id] = true
	}
	out := make([]*Policy, 0, len(ps))
	var removed []string
	for _, p := range ps {
		if del[p.ID] {
			removed = append(removed, p.ID)
			continue
		}
		out = append(out, p)
	}
	return out, removed
}

func sameBlocks(compiled, blocks []Block) bool {
	blocks = slices.Clone(blocks)
	slices.SortFunc(blocks, func(a, b Block) int { return strings.Compare(a.ID, b.ID) })
	return len(compiled) == len(blocks) && (len(blocks) == 0 || reflect.DeepEqual(compiled, blocks))
}

func (s *Snapshot) change(incoming []Policy, remove []string, now time.Time, blocks []Block, version uint64) (*Snapshot, []*Policy, Changes, error) {
	upd, ch, err := s.classify(incoming, now)
	if err != nil {
		return nil, nil, Changes{}, err
	}
	gone := s.held(remove)
	ch.Removed = gone
	n, next, err := s.apply(upd, gone, blocks, version)
	if err != nil {
		return nil, nil, Changes{}, err
	}
	return n, next, ch, nil
}

// apply is the snapshot at version of s's set with upd's policies put
// and gone's removed (both sorted by id, sharing none), and blocks:
// compiled as little as the change needs.
func (s *Snapshot) apply(upd []*Policy, gone []string, blocks []Block, version uint64) (*Snapshot, []*Policy, error) {
	next := mergeSorted(s.ps, upd, gone)
	n := s.fork(next, version)
	if err := n.reblock(blocks); err != nil {
		return nil, nil, err
	}
	if len(upd)+len(gone) == 0 {
		return n, next, nil
	}
	n.relink(s, upd, gone)
	dirty := n.descendants(upd, gone)
	entries, err := n.compileDirty(dirty)
	if err != nil {
		return nil, nil, err
	}
	n.drop(gone)
	n.replace(dirty, entries)
	if errs := n.checkConflicts(entries); len(errs) > 0 {
		return nil, nil, joinErrs(errs)
	}
	return n, next, nil
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

// held is the ids of remove the set holds, sorted, once each.
func (s *Snapshot) held(remove []string) []string {
	var out []string
	for _, id := range remove {
		if _, ok := s.byID.get(id); ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// mergeSorted is ps with upd's policies replacing or joining those of
// their ids, and without gone's; all three are sorted by id (upd and gone
// share none), and so is the result.
func mergeSorted(ps, upd []*Policy, gone []string) []*Policy {
	out := make([]*Policy, 0, len(ps)+len(upd))
	i := 0
	skipTo := func(id string) { // copies ps's policies before id, and skips id's
		j, found := slices.BinarySearchFunc(ps[i:], id, cmpPolicyID)
		out = append(out, ps[i:i+j]...)
		if i += j; found {
			i++
		}
	}
	for u, g := 0, 0; u < len(upd) || g < len(gone); {
		if g == len(gone) || u < len(upd) && upd[u].ID < gone[g] {
			skipTo(upd[u].ID)
			out = append(out, upd[u])
			u++
			continue
		}
		skipTo(gone[g])
		g++
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

// relink updates children for upd's extends and gone's removal; prev is
// the set before.
func (n *Snapshot) relink(prev *Snapshot, upd []*Policy, gone []string) {
	cloned := false
	// move files id under the parent it extends now instead of was.
	move := func(id, now string) {
		was := ""
		if old, ok := prev.Policy(id); ok {
			was = old.Extends
		}
		if was == now {
			return
		}
		if !cloned {
			n.children, cloned = maps.Clone(n.children), true
		}
		if was != "" {
			n.children[was] = slices.DeleteFunc(slices.Clone(n.children[was]), func(c string) bool { return c == id })
			if len(n.children[was]) == 0 {
				delete(n.children, was)
			}
		}
		if now != "" {
			n.children[now] = append(slices.Clip(n.children[now]), id)
		}
	}
	for _, p := range upd {
		move(p.ID, p.Extends)
	}
	for _, id := range gone {
		move(id, "") // a removed policy extends nothing
	}
}

// descendants is upd's ids and every policy that extends one of them or
// one of gone, however indirectly, sorted: what a change must recompile
// (a policy left extending a removed one fails, as the full compile
// fails it).
func (n *Snapshot) descendants(upd []*Policy, gone []string) []string {
	seen := make(map[string]bool, len(upd)+len(gone))
	var queue []string
	for _, p := range upd {
		seen[p.ID] = true
		queue = append(queue, p.ID)
	}
	for _, id := range gone {
		seen[id] = true
	}
	for _, id := range gone {
		for _, c := range n.children[id] {
			if !seen[c] {
				seen[c] = true
				queue = append(queue, c)
			}
		}
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

// reblock makes blocks (in any order) n's: the entries of blocks gone or
// changed leave the index, and new ones join it under new slots.
func (n *Snapshot) reblock(blocks []Block) error {
	if sameBlocks(n.blocks, blocks) {
		return nil
	}
	blocks = slices.Clone(blocks)
	slices.SortFunc(blocks, func(a, b Block) int { return strings.Compare(a.ID, b.ID) })
	was := make(map[string]*Block, len(n.blocks))
	for i := range n.blocks {
		was[n.blocks[i].ID] = &n.blocks[i]
	}
	now := make(map[string]*Block, len(blocks))
	for i := range blocks {
		now[blocks[i].ID] = &blocks[i]
	}
	for i, e := range n.entries { // ~1 ms at 300k: blocks have no id index
		if e != nil && e.block != nil && !sameBlock(now[e.id], e.block) {
			n.unindex(int32(i), indexCond(e))
			n.entries[i] = nil
		}
	}
	var errs []error
	for i := range blocks {
		if sameBlock(was[blocks[i].ID], &blocks[i]) {
			continue
		}
		e, err := compileBlock(&blocks[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		slot := int32(len(n.entries))
		n.entries = append(n.entries, e)
		n.index(slot, indexCond(e), true)
	}
	n.blocks = blocks
	return joinErrs(errs)
}

func sameBlock(a, b *Block) bool { return a != nil && b != nil && reflect.DeepEqual(*a, *b) }

// drop takes the removed ids' entries out of the index, the conflict
// groups and byID.
func (n *Snapshot) drop(gone []string) {
	n.replace(gone, nil)
	for _, id := range gone {
		n.byID.del(id)
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
