package meta

import (
	"cmp"
	"slices"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

// The policy set's history: every version the meta group applied, who
// made it, when and what it changed, with the bodies each change replaced
// (a reverse diff). Any kept version is rebuilt from the current set by
// undoing the newer ones, so the history costs what changed, not a copy
// of the set per version: a 500k-policy set changed by one policy keeps
// one body.

// Bounds of the history. The oldest versions fall off first; the last two
// are always kept, so the last change can always be undone (one version
// touches at most 2×MaxPolicies: a set replaced whole).
const (
	// MaxHistoryVersions is how many versions the history lists.
	MaxHistoryVersions = 100
	// MaxHistoryChanges bounds the policy changes kept to rebuild older
	// versions: each is an id and, for a change or a removal, the body it
	// replaced (about 800 bytes of heap for a tenant override,
	// BenchmarkHistory). The bound is the largest set: the bodies kept
	// never weigh more than a full set does (a version's own are at most
	// the set it changed).
	MaxHistoryChanges = MaxPolicies
	// MaxHistoryIDs is how many ids of each kind (added, changed,
	// removed) a version lists; the count is always whole.
	MaxHistoryIDs = 100
)

// historyBounds are what trim keeps to: the constants (tests lower them).
var historyBounds = struct{ versions, changes int }{MaxHistoryVersions, MaxHistoryChanges}

// OpBaseline is the op of the version the history began at: the set as it
// was when the node first kept history (a cluster upgraded from a quorate
// without it). It has no author, time or changes.
const OpBaseline = "baseline"

// History is the policy set's versions, oldest first, consecutive, the
// last the current one. A History is never modified once shared: a change
// makes a new one.
type History struct {
	Entries []HistoryEntry `json:"entries,omitempty"`
	// FellOff is the newest version that fell off (0: none has), and
	// Dropped how many have.
	FellOff uint64 `json:"fell_off,omitempty"`
	Dropped uint64 `json:"dropped,omitempty"`
}

// HistoryEntry is one version of the set.
type HistoryEntry struct {
	Version uint64 `json:"version"`
	// At is the command's time (the meta leader's clock when it proposed
	// it), in Unix nanoseconds.
	At  int64  `json:"at,omitempty"`
	Who string `json:"who,omitempty"`
	Op  string `json:"op"`
	// Source names an apply's document (the file the CLI sent); To is a
	// rollback's target version.
	Source string `json:"source,omitempty"`
	To     uint64 `json:"to,omitempty"`
	// Blocks are the emergency blocks a block or unblock added or lifted.
	Blocks []string `json:"blocks,omitempty"`
	// Added, Changed and Removed are the policies the version changed.
	Added   IDSample `json:"added,omitzero"`
	Changed IDSample `json:"changed,omitzero"`
	Removed IDSample `json:"removed,omitzero"`
	// Extraction is true when the version changed the extraction, which
	// was ExtractionBefore (nil: the defaults).
	Extraction       bool                `json:"extraction,omitempty"`
	ExtractionBefore *extract.Extraction `json:"extraction_before,omitempty"`
	// Undo takes the set from this version back to the one before. The
	// oldest entry has none: no older version is rebuilt through it.
	Undo []Undo `json:"undo,omitempty"`
}

// IDSample is how many policies a version added, changed or removed, and
// the first MaxHistoryIDs of their ids (sorted).
type IDSample struct {
	Count int      `json:"count"`
	IDs   []string `json:"ids,omitempty"`
}

func sample(ids []string) IDSample {
	return IDSample{Count: len(ids), IDs: slices.Clone(ids[:min(len(ids), MaxHistoryIDs)])}
}

// Undo is one policy a version touched and what it was before: Before is
// nil for one the version added.
type Undo struct {
	ID     string         `json:"id"`
	Before *policy.Policy `json:"before,omitempty"`
}

// Version is the entry of version v, if the history keeps it.
func (h History) Version(v uint64) (HistoryEntry, bool) {
	i, ok := slices.BinarySearchFunc(h.Entries, v, func(e HistoryEntry, v uint64) int { return cmp.Compare(e.Version, v) })
	if !ok {
		return HistoryEntry{}, false
	}
	return h.Entries[i], true
}

// Oldest is the oldest version kept (0 when none is).
func (h History) Oldest() uint64 {
	if len(h.Entries) == 0 {
		return 0
	}
	return h.Entries[0].Version
}

// changes is how many undo records the history holds.
func (h History) changes() int {
	n := 0
	for _, e := range h.Entries {
		n += len(e.Undo)
	}
	return n
}

// Changes is how many policy changes the history keeps to rebuild older
// versions (bounded by MaxHistoryChanges).
func (h History) Changes() int { return h.changes() }

// push records version e on top of the history of prev (the version
// before it), dropping the oldest versions past the bounds. A history
// that does not end at prev (none yet: a new cluster, or one upgraded
// from a quorate without history) starts again at prev.
func (h History) push(e HistoryEntry, prev uint64) History {
	var entries []HistoryEntry
	if n := len(h.Entries); n > 0 && h.Entries[n-1].Version == prev {
		entries = make([]HistoryEntry, 0, n+1)
		entries = append(entries, h.Entries...)
	} else if prev > 0 {
		entries = []HistoryEntry{{Version: prev, Op: OpBaseline}}
	}
	h.Entries = append(entries, e)
	h.trim()
	return h
}

// trim drops the oldest versions while the history is past a bound,
// keeping the last two whatever they weigh, so that the last change can
// be undone. It modifies h.Entries: only a fresh copy may be trimmed.
func (h *History) trim() {
	if len(h.Entries) == 0 {
		return
	}
	h.Entries[0].Undo = nil
	for len(h.Entries) > 2 && (len(h.Entries) > historyBounds.versions || h.changes() > historyBounds.changes) {
		h.FellOff = h.Entries[0].Version
		h.Dropped++
		h.Entries = h.Entries[1:]
		h.Entries[0].Undo = nil
	}
}

// entryOf is the history entry of the version that c made of prev, with
// changes ch.
func entryOf(c *Command, prev PolicyState, ch policy.Changes, block *policy.Block) HistoryEntry {
	e := HistoryEntry{Version: prev.Version + 1, At: c.Now, Who: c.Who, Op: c.Op, Source: c.Source, To: c.To,
		Added: sample(ch.Added), Changed: sample(ch.Changed), Removed: sample(ch.Removed),
		Extraction: ch.Extraction, Undo: undoOf(prev.Policies, ch)}
	if ch.Extraction {
		e.ExtractionBefore = prev.Extraction
	}
	switch {
	case block != nil:
		e.Blocks = []string{block.ID}
	case c.Op == OpUnblock:
		e.Blocks = slices.Clone(c.IDs)
	}
	return e
}

// undoOf is what takes the set after changes ch back to prev: the added
// ids, and the bodies the changed and removed ones had (shared with prev:
// a set's policies are never modified).
func undoOf(prev []*policy.Policy, ch policy.Changes) []Undo {
	n := len(ch.Added) + len(ch.Changed) + len(ch.Removed)
	if n == 0 {
		return nil
	}
	undo := make([]Undo, 0, n)
	for _, id := range ch.Added {
		undo = append(undo, Undo{ID: id})
	}
	touched := make(map[string]*policy.Policy, len(ch.Changed)+len(ch.Removed))
	for _, id := range ch.Changed {
		touched[id] = nil
	}
	for _, id := range ch.Removed {
		touched[id] = nil
	}
	for id, p := range lookup(prev, touched) {
		undo = append(undo, Undo{ID: id, Before: p})
	}
	slices.SortFunc(undo, func(a, b Undo) int { return cmp.Compare(a.ID, b.ID) })
	return undo
}

// lookup finds the policies ids names in the set ps by binary search: the
// replicated set is sorted by id (Restore sorts a snapshot's).
func lookup(ps []*policy.Policy, ids map[string]*policy.Policy) map[string]*policy.Policy {
	found := make(map[string]*policy.Policy, len(ids))
	byID := func(p *policy.Policy, id string) int { return cmp.Compare(p.ID, id) }
	for id := range ids {
		if i, ok := slices.BinarySearchFunc(ps, id, byID); ok {
			found[id] = ps[i]
		}
	}
	return found
}

// valid reports whether h can be the history of a set at version v: what
// a restored snapshot's must be (one that is not is dropped; the history
// starts again at v).
func (h History) valid(v uint64) bool {
	for i, e := range h.Entries {
		if i > 0 && e.Version != h.Entries[i-1].Version+1 {
			return false
		}
	}
	return len(h.Entries) == 0 || h.Entries[len(h.Entries)-1].Version == v
}
