package meta

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

// Rebuilding kept versions from the current set and the history: the
// diff between two versions, and the command that rolls the set back to
// one. Both run on a node's replica, outside the state machine: a
// replica's history is its own record (one upgraded from a quorate
// without history starts it later than another), so what the state
// machine applies must not depend on it. A rollback is therefore
// proposed as the changes themselves, relative to the version they were
// computed from (Command.Base).

// CheckVersion says why version v cannot be rebuilt, if it cannot: a
// version after the current one, or one the history does not keep.
func CheckVersion(st PolicyState, h History, v uint64) error {
	switch _, kept := h.Version(v); {
	case v > st.Version:
		return Errorf(Invalid, "policy version %d does not exist: the set is at version %d", v, st.Version)
	case v == st.Version || kept:
		return nil
	case v < h.Oldest() && v <= h.FellOff:
		return Errorf(Invalid, "policy version %d fell off the history, which keeps the last %d versions and at most %d policy changes: the oldest kept is %d",
			v, historyBounds.versions, historyBounds.changes, h.Oldest())
	case len(h.Entries) == 0:
		return Errorf(Invalid, "policy version %d is not in the history: it starts with the next change (the set is at version %d)", v, st.Version)
	}
	return Errorf(Invalid, "policy version %d is not in the history: it starts at version %d", v, h.Oldest())
}

// overlay is, for every policy a version after v touched, what it was at
// v (nil: absent); the extraction at v if a later version changed it
// (ext, true). What it does not name is at v as it is now.
func overlay(h History, v uint64) (m map[string]*policy.Policy, ext *extract.Extraction, extChanged bool) {
	m = map[string]*policy.Policy{}
	// Newest first: the oldest change after v says what was there at v.
	for i := len(h.Entries) - 1; i >= 0 && h.Entries[i].Version > v; i-- {
		e := &h.Entries[i]
		for _, u := range e.Undo {
			m[u.ID] = u.Before
		}
		if e.Extraction {
			ext, extChanged = e.ExtractionBefore, true
		}
	}
	return m, ext, extChanged
}

// RollbackCommand is the command that makes the set st equal to version
// to's, with history h: the policies to put and the ids to remove. A
// version the history does not keep is refused (Invalid), naming why.
func RollbackCommand(st PolicyState, h History, to uint64) (*Command, error) {
	if to == 0 {
		return nil, Errorf(Invalid, "to: the version to roll back to is required (quorate policy history lists them)")
	}
	if err := CheckVersion(st, h, to); err != nil {
		return nil, err
	}
	c := &Command{Op: OpRollback, To: to, Base: st.Version, Extraction: st.Extraction}
	at, ext, extChanged := overlay(h, to)
	if extChanged {
		c.Extraction = ext
	}
	cur := lookup(st.Policies, at)
	for _, id := range slices.Sorted(maps.Keys(at)) {
		was, now := at[id], cur[id]
		switch {
		case was == nil && now != nil:
			c.IDs = append(c.IDs, id)
		case was != nil && (now == nil || !policy.Same(was, now)):
			c.Policies = append(c.Policies, *was)
		}
	}
	return c, nil
}

// nextRollback previews rollback c of cur at now, as NextPolicies does
// the other commands.
func nextRollback(cur []*policy.Policy, c *Command, now time.Time) ([]*policy.Policy, policy.Changes, error) {
	from, removed := policy.Without(cur, c.IDs)
	next, ch, err := policy.ApplySet(from, c.Policies, false, now)
	if err != nil {
		return nil, ch, err
	}
	ch.Removed = removed
	return next, ch, nil
}

// Diff is how the set changed from version a to version b: the changes
// and the diff as an apply's dry run prints it (at most maxLines lines,
// then a line saying how many more). Either version may be the older.
func Diff(st PolicyState, h History, a, b uint64, maxLines int) (policy.Changes, string, error) {
	for _, v := range []uint64{a, b} {
		if err := CheckVersion(st, h, v); err != nil {
			return policy.Changes{}, "", err
		}
	}
	atA, extA, okA := overlay(h, a)
	atB, extB, okB := overlay(h, b)
	ids := maps.Clone(atA)
	maps.Copy(ids, atB)
	cur := lookup(st.Policies, ids)
	state := func(m map[string]*policy.Policy, id string) *policy.Policy {
		if p, ok := m[id]; ok {
			return p
		}
		return cur[id]
	}
	var ch policy.Changes
	var before, after []*policy.Policy
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		pa, pb := state(atA, id), state(atB, id)
		switch {
		case pa == nil && pb == nil:
		case pa == nil:
			ch.Added = append(ch.Added, id)
			after = append(after, pb)
		case pb == nil:
			ch.Removed = append(ch.Removed, id)
			before = append(before, pa)
		case !policy.Same(pa, pb):
			ch.Changed = append(ch.Changed, id)
			before, after = append(before, pa), append(after, pb)
		}
	}
	if !okA {
		extA = st.Extraction
	}
	if !okB {
		extB = st.Extraction
	}
	ch.Extraction = !extract.Same(extA, extB)
	return ch, clip(policy.Diff(before, after)+policy.ExtractionDiff(extA, extB), maxLines), nil
}

// clip keeps the first max lines of diff, and says how many it left out.
func clip(diff string, max int) string {
	lines := strings.SplitAfter(diff, "\n")
	if max <= 0 || len(lines) <= max+1 { // the last is "" after the final newline
		return diff
	}
	return strings.Join(lines[:max], "") + fmt.Sprintf("... %d more lines\n", len(lines)-1-max)
}

// Newest is the history's newest limit versions, newest first (all with
// limit 0).
func (h History) Newest(limit int) []HistoryEntry {
	out := slices.Clone(h.Entries)
	slices.Reverse(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
