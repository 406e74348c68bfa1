package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
)

// Splitting a group's hash range online. The cluster moves the upper (or
// lower) part of a group's range to a new group in three control entries,
// each applied through a Raft log like a command:
//
//  1. Fence{Keep, Move} on the parent: from this entry on the parent serves
//     only Keep; every piece of state of Move is taken out of its live
//     tables into a frozen copy, which nothing changes any more.
//  2. Adopt{Keep: Move, Seq, Last, Chunk} on the child, once per chunk of
//     the frozen copy (ExportChunk), in order: the child serves nothing
//     until the last chunk, then serves its range from exactly the state
//     the parent froze.
//  3. Release{Move} on the parent drops the frozen copy.
//
// Every op on a key of Move is decided either by the parent before the
// fence or by the child after its last chunk; in between, both answer
// ErrMoved and change nothing. See the package doc.

// Range is an inclusive range of key hashes. The zero value means every
// hash: the range of a group that never split.
type Range struct{ Lo, Hi uint64 }

// fullRange is every hash, spelled out.
var fullRange = Range{0, math.MaxUint64}

// IsZero reports whether r is the zero Range, which means every hash.
func (r Range) IsZero() bool { return r == Range{} }

// Contains reports whether hash h is in r.
func (r Range) Contains(h uint64) bool { return r.IsZero() || r.Lo <= h && h <= r.Hi }

func (r Range) String() string {
	if r.IsZero() {
		return "[all]"
	}
	return fmt.Sprintf("[%#016x, %#016x]", r.Lo, r.Hi)
}

// spelled is r with the zero value written out as every hash.
func (r Range) spelled() Range {
	if r.IsZero() {
		return fullRange
	}
	return r
}

// normal is r with every hash written as the zero value, as the machine
// stores its range.
func (r Range) normal() Range {
	if r == fullRange {
		return Range{}
	}
	return r
}

// ControlKind says what a Control entry does. Values are part of the wire
// format: append only.
type ControlKind uint8

// The control entries.
const (
	ctlUnspecified ControlKind = iota
	// CtlFence freezes Move out of the parent, which keeps Keep.
	CtlFence
	// CtlAdopt loads chunk Seq of a frozen copy into the child, which will
	// own Keep; Last ends the loading.
	CtlAdopt
	// CtlRelease drops the parent's frozen copy of Move.
	CtlRelease
	numCtls
)

var ctlNames = [numCtls]string{"unspecified", "fence", "adopt", "release"}

func (k ControlKind) String() string {
	if k < numCtls {
		return ctlNames[k]
	}
	return fmt.Sprintf("control(%d)", uint8(k))
}

// Control is a log entry that changes which hashes a group serves rather
// than applying ops. Which fields count depends on Kind (see the Ctl
// constants).
type Control struct {
	Kind       ControlKind
	Keep, Move Range
	Seq        uint64
	Last       bool
	Chunk      []byte
}

const (
	// controlMarker starts every encoded Control: encoded Commands start
	// with their version (1 or 2), so IsControl tells the two apart.
	controlMarker = 0xC1
	// MaxChunk bounds the Chunk of a Control.
	MaxChunk = 4 << 20
	// controlSize is an encoded Control without its chunk: marker, kind,
	// four range bounds, seq, last and the chunk's length.
	controlSize = 1 + 1 + 4*8 + 8 + 1 + 4
)

// IsControl reports whether b, a log entry, encodes a Control rather than a
// Command.
func IsControl(b []byte) bool { return len(b) > 0 && b[0] == controlMarker }

// AppendControl appends the encoding of c to dst: fixed-width fields, so
// that every encoding is the only one of its Control.
func AppendControl(dst []byte, c *Control) []byte {
	dst = append(dst, controlMarker, byte(c.Kind))
	for _, v := range [...]uint64{c.Keep.Lo, c.Keep.Hi, c.Move.Lo, c.Move.Hi, c.Seq} {
		dst = binary.LittleEndian.AppendUint64(dst, v)
	}
	last := byte(0)
	if c.Last {
		last = 1
	}
	dst = append(dst, last)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(c.Chunk)))
	return append(dst, c.Chunk...)
}

// DecodeControl decodes a Control encoded by AppendControl. The Chunk
// aliases b.
func DecodeControl(b []byte) (*Control, error) {
	if len(b) < controlSize || b[0] != controlMarker {
		return nil, fmt.Errorf("%w: not a control entry", ErrCorrupt)
	}
	c := &Control{Kind: ControlKind(b[1])}
	if c.Kind == ctlUnspecified || c.Kind >= numCtls {
		return nil, fmt.Errorf("%w: control kind %d", ErrCorrupt, b[1])
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[2+8*i:]) }
	c.Keep, c.Move, c.Seq = Range{u(0), u(1)}, Range{u(2), u(3)}, u(4)
	switch b[42] {
	case 0:
	case 1:
		c.Last = true
	default:
		return nil, fmt.Errorf("%w: control flag %d", ErrCorrupt, b[42])
	}
	n := binary.LittleEndian.Uint32(b[43:])
	if n > MaxChunk || uint64(n) != uint64(len(b)-controlSize) {
		return nil, fmt.Errorf("%w: control chunk of %d bytes in %d", ErrCorrupt, n, len(b)-controlSize)
	}
	if n > 0 {
		c.Chunk = b[controlSize:]
	}
	return c, nil
}

// SplitInfo is a machine's split state, for the cluster's coordinator.
type SplitInfo struct {
	Owned   Range  // the hashes served (zero: all)
	Loading bool   // adopting: nothing is served until the last chunk
	NextSeq uint64 // the adoption's next chunk (0: no adoption began)
	Frozen  Range  // the range of the frozen copy awaiting Release (zero: none)
}

// Split returns the machine's split state.
func (m *Machine) Split() SplitInfo {
	s := SplitInfo{Owned: m.owned, Loading: m.loading, NextSeq: m.nextSeq}
	if m.frozen != nil {
		s.Frozen = m.frozen.move
	}
	return s
}

// serves reports whether the machine decides an op of kind k on key hash
// h: nothing while loading; a Credit (per scope, carrying the owned range
// in its Result) or a Return (by lease ID; the leases of a moved range are
// gone) whatever h; other ops only on the hashes it owns.
func (m *Machine) serves(k OpKind, h uint64) bool {
	switch {
	case m.loading:
		return false
	case k == OpCredit || k == OpReturn:
		return true
	}
	return m.owned.Contains(h)
}

// ApplyControl applies a control entry. Like Apply it is deterministic and
// reads no clock; unlike an op, an entry that does not fit the machine's
// split state is refused with an error (wrapping ErrSplit) and changes
// nothing. Repeating an entry already applied returns nil and changes
// nothing, so a coordinator may retry any step.
func (m *Machine) ApplyControl(c *Control) error {
	switch c.Kind {
	case CtlFence:
		return m.fence(c.Keep, c.Move)
	case CtlAdopt:
		return m.adopt(c)
	case CtlRelease:
		switch {
		case m.frozen == nil:
			return nil
		case m.frozen.move != c.Move:
			return fmt.Errorf("%w: release of %s, but %s is frozen", ErrSplit, c.Move, m.frozen.move)
		}
		m.frozen = nil
		return nil
	}
	return fmt.Errorf("%w: control kind %s", ErrSplit, c.Kind)
}

// proper reports whether r is a non-empty range written out (not zero).
func (r Range) proper() bool { return !r.IsZero() && r.Lo <= r.Hi }

// adjacent reports whether a and b are proper, disjoint and touching.
func adjacent(a, b Range) bool {
	if !a.proper() || !b.proper() {
		return false
	}
	if a.Lo > b.Lo {
		a, b = b, a
	}
	return a.Hi != math.MaxUint64 && a.Hi+1 == b.Lo
}

// Frozen is the state a fence took out of a machine: a Machine that
// nothing applies to, holding the moved range's live entries, a copy of
// every idempotency record and credit, and the parent's time and next
// lease ID. It never changes, so its methods may run on any goroutine,
// beside the machine's Apply, once the pointer has been read safely.
type Frozen struct {
	move Range
	m    *Machine

	once   sync.Once
	items  []item   // every live entry, in chunk order
	starts []int    // chunk i holds items[starts[i]:starts[i+1]]
	scopes []string // the credit scopes, ascending (items of tCredits)
}

// item is one entry of a frozen machine: its table and its key.
type item struct {
	table int
	key   uint64
}

// Tables of item.table, in the order chunks carry them.
const (
	tTokens = iota
	tLeaky
	tTats
	tQueues
	tFixed
	tSliding
	tLogs
	tLeases
	tIdem
	tCredits // key: the index of the scope in Frozen.scopes
	numItemTables
)

// Chunk bounds: entries and approximate encoded bytes per chunk. A chunk
// is one log entry of the child, and a follower catching up receives up to
// 256 entries in one AppendEntries (shard's MaxAppendEntries), which must
// fit the peer port's 64 MiB messages: 256 × 192 KiB = 48 MiB.
var (
	chunkEntries = 8 << 10
	chunkBytes   = 192 << 10
)

// fence takes move out of the machine, which keeps keep.
func (m *Machine) fence(keep, move Range) error {
	if !adjacent(keep, move) {
		return fmt.Errorf("%w: fence keeps %s and moves %s: not adjacent non-empty ranges", ErrSplit, keep, move)
	}
	if m.owned == keep.normal() && (m.frozen == nil || m.frozen.move == move) {
		return nil // this fence, again
	}
	switch {
	case m.loading:
		return fmt.Errorf("%w: fence while adopting %s", ErrSplit, m.owned)
	case m.frozen != nil:
		return fmt.Errorf("%w: fence while %s is frozen", ErrSplit, m.frozen.move)
	}
	// A group that never split owns every hash as far as it knows; the
	// ring gives it one range, so that is what it splits.
	lo, hi := min(keep.Lo, move.Lo), max(keep.Hi, move.Hi)
	if !m.owned.IsZero() && (Range{lo, hi}) != m.owned.spelled() {
		return fmt.Errorf("%w: fence of %s and %s, but the group owns %s", ErrSplit, keep, move, m.owned)
	}
	f := New(m.cfg)
	f.now, f.nextLease = m.now, m.nextLease
	now := m.now
	freeze(m.tokens, f.tokens, &m.index, move, now, tbDead)
	freeze(m.leaky, f.leaky, &m.index, move, now, tbDead)
	freeze(m.tats, f.tats, &m.index, move, now, tatDead)
	freeze(m.queues, f.queues, nil, move, now, tatDead)
	freeze(m.fixed, f.fixed, nil, move, now, fwDead)
	freeze(m.sliding, f.sliding, nil, move, now, swDead)
	freeze(m.logs, f.logs, nil, move, now, logDead)
	for id, l := range m.leases {
		if move.Contains(l.key) {
			if !leaseDead(l, now) {
				f.leases[id] = l
			}
			delete(m.leases, id)
		}
	}
	for h := range m.byKey {
		if move.Contains(h) {
			drop(&m.index, m.byKey, h)
		}
	}
	for k, e := range m.idem {
		if !idemDead(e, now) {
			f.idem[k] = e
		}
	}
	for scope, cs := range m.credits {
		if cs = remembered(cs, now); len(cs) > 0 {
			f.credits[scope] = slices.Clone(cs)
		}
	}
	m.owned, m.frozen = keep.normal(), &Frozen{move: move, m: f}
	return nil
}

// freeze moves the entries of from whose key is in r to to, leaving out
// the dead ones, and takes them out of x (if not nil).
func freeze[V any](from, to map[uint64]V, x *bucketIndex, r Range, now int64, dead func(V, int64) bool) {
	for h, v := range from {
		if r.Contains(h) {
			if !dead(v, now) {
				to[h] = v
			}
			drop(x, from, h)
		}
	}
}

// plan lists the frozen entries in chunk order, once: tables in item
// order, keys ascending, cut into chunks of at most chunkEntries entries
// and about chunkBytes bytes. It depends on the frozen state alone, so
// every replica cuts the same chunks.
func (f *Frozen) plan() {
	f.once.Do(func() {
		m := f.m
		add := func(table int, keys []uint64) {
			slices.Sort(keys)
			for _, k := range keys {
				f.items = append(f.items, item{table, k})
			}
		}
		add(tTokens, slices.Collect(maps.Keys(m.tokens)))
		add(tLeaky, slices.Collect(maps.Keys(m.leaky)))
		add(tTats, slices.Collect(maps.Keys(m.tats)))
		add(tQueues, slices.Collect(maps.Keys(m.queues)))
		add(tFixed, slices.Collect(maps.Keys(m.fixed)))
		add(tSliding, slices.Collect(maps.Keys(m.sliding)))
		add(tLogs, slices.Collect(maps.Keys(m.logs)))
		add(tLeases, slices.Collect(maps.Keys(m.leases)))
		add(tIdem, slices.Collect(maps.Keys(m.idem)))
		// Credits too are cut into chunks, a scope at a time: thousands of
		// limit names would not fit one.
		f.scopes = slices.Sorted(maps.Keys(m.credits))
		for i := range f.scopes {
			f.items = append(f.items, item{tCredits, uint64(i)})
		}
		f.starts = []int{0}
		n, size := 0, 0
		for i, it := range f.items {
			w := f.weight(it)
			if n > 0 && (n >= chunkEntries || size+w > chunkBytes) {
				f.starts = append(f.starts, i)
				n, size = 0, 0
			}
			n, size = n+1, size+w
		}
		f.starts = append(f.starts, len(f.items))
	})
}

// weight is about how many bytes an item takes in a chunk.
func (f *Frozen) weight(it item) int {
	switch it.table {
	case tLogs:
		return 24 + 20*len(f.m.logs[it.key].live())
	case tLeases:
		l := f.m.leases[it.key]
		return 64 + len(l.scope) + len(l.holder)
	case tIdem:
		return 80
	case tCredits:
		scope := f.scopes[it.key]
		return 16 + len(scope) + 10*len(f.m.credits[scope])
	}
	return 40
}

// Frozen returns the machine's frozen copy, nil if it holds none.
func (m *Machine) Frozen() *Frozen { return m.frozen }

// Range is the hash range the frozen copy holds.
func (f *Frozen) Range() Range { return f.move }

// ExportChunk returns chunk seq of the frozen copy, and whether it is the
// last (see Frozen.Chunk). It reads the machine; a caller outside the
// goroutine that applies to it can read Frozen under its lock and call
// Chunk after releasing it.
func (m *Machine) ExportChunk(seq uint64) (chunk []byte, last bool, err error) {
	f := m.frozen
	if f == nil {
		return nil, false, fmt.Errorf("%w: nothing is frozen", ErrSplit)
	}
	return f.Chunk(seq)
}

// Chunk returns chunk seq of the frozen copy, and whether it is the last:
// the snapshot encoding of a machine holding that chunk's entries (the
// credits of whole scopes among them), with the frozen time and next
// lease ID. Chunks
// are a function of the frozen copy alone, so any replica may export any
// chunk; together they carry all of it.
func (f *Frozen) Chunk(seq uint64) (chunk []byte, last bool, err error) {
	f.plan()
	n := uint64(len(f.starts) - 1)
	if seq >= n {
		return nil, false, fmt.Errorf("%w: chunk %d of %d", ErrSplit, seq, n)
	}
	src, c := f.m, New(f.m.cfg)
	c.now, c.nextLease = src.now, src.nextLease
	for _, it := range f.items[f.starts[seq]:f.starts[seq+1]] {
		k := it.key
		switch it.table {
		case tTokens:
			c.tokens[k] = src.tokens[k]
		case tLeaky:
			c.leaky[k] = src.leaky[k]
		case tTats:
			c.tats[k] = src.tats[k]
		case tQueues:
			c.queues[k] = src.queues[k]
		case tFixed:
			c.fixed[k] = src.fixed[k]
		case tSliding:
			c.sliding[k] = src.sliding[k]
		case tLogs:
			c.logs[k] = src.logs[k]
		case tLeases:
			c.leases[k] = src.leases[k]
		case tIdem:
			c.idem[k] = src.idem[k]
		case tCredits:
			scope := f.scopes[k]
			c.credits[scope] = src.credits[scope] // read only: Snapshot writes them
		}
	}
	var b bytes.Buffer
	if err := c.Snapshot(&b); err != nil {
		return nil, false, err
	}
	return b.Bytes(), seq == n-1, nil
}

// adopt applies one chunk of an adoption of c.Keep.
func (m *Machine) adopt(c *Control) error {
	keep := c.Keep.normal()
	if !c.Keep.proper() || keep.IsZero() {
		return fmt.Errorf("%w: adoption of %s", ErrSplit, c.Keep)
	}
	same := m.nextSeq > 0 && m.owned == keep && m.frozen == nil
	switch {
	case same && c.Seq < m.nextSeq:
		return nil // a retry of a chunk applied
	case same && !m.loading:
		return fmt.Errorf("%w: chunk %d of an adoption of %s that ended at %d", ErrSplit, c.Seq, keep, m.nextSeq)
	case same && c.Seq > m.nextSeq:
		return fmt.Errorf("%w: chunk %d, expected %d", ErrSplit, c.Seq, m.nextSeq)
	case !same && c.Seq != 0:
		return fmt.Errorf("%w: chunk %d of %s, but no adoption of it began", ErrSplit, c.Seq, keep)
	case !same && !m.fresh():
		return fmt.Errorf("%w: adoption of %s by a group that holds state or owns %s", ErrSplit, keep, m.owned)
	}
	t := New(m.cfg)
	if err := t.Restore(bytes.NewReader(c.Chunk)); err != nil {
		return fmt.Errorf("%w: chunk %d: %w", ErrSplit, c.Seq, err)
	}
	if err := t.chunkFits(c.Keep); err != nil {
		return fmt.Errorf("%w: chunk %d: %w", ErrSplit, c.Seq, err)
	}
	if c.Seq == 0 {
		// The machine holds nothing live: drop what its sweeper has not
		// (replicas differ there), so that nothing but the chunks counts.
		now, next := m.now, m.nextLease
		m.reset()
		m.now, m.nextLease = now, next
		m.owned, m.loading = keep, true
	}
	m.merge(t)
	m.nextSeq = c.Seq + 1
	if c.Last {
		m.loading = false
	}
	return nil
}

// fresh reports whether the machine holds no live state and has never
// split: whether it may adopt a range. Dead entries do not count, since
// replicas' sweepers delete them at different times.
func (m *Machine) fresh() bool {
	if !m.owned.IsZero() || m.loading || m.nextSeq != 0 || m.frozen != nil {
		return false
	}
	now := m.now
	for _, cs := range m.credits {
		if len(remembered(cs, now)) > 0 {
			return false
		}
	}
	return !anyLive(m.tokens, now, tbDead) && !anyLive(m.leaky, now, tbDead) &&
		!anyLive(m.tats, now, tatDead) && !anyLive(m.queues, now, tatDead) &&
		!anyLive(m.fixed, now, fwDead) && !anyLive(m.sliding, now, swDead) &&
		!anyLive(m.logs, now, logDead) && !anyLive(m.leases, now, leaseDead) &&
		!anyLive(m.idem, now, idemDead)
}

func anyLive[V any](t map[uint64]V, now int64, dead func(V, int64) bool) bool {
	for _, v := range t {
		if !dead(v, now) {
			return true
		}
	}
	return false
}

// chunkFits checks that a decoded chunk is one: no split state of its
// own, and every bucket and lease in keep.
func (t *Machine) chunkFits(keep Range) error {
	if !t.owned.IsZero() || t.loading || t.nextSeq != 0 || t.frozen != nil {
		return fmt.Errorf("%w: a chunk with split state", ErrCorrupt)
	}
	if keyOutside(t.tokens, keep) || keyOutside(t.leaky, keep) || keyOutside(t.tats, keep) ||
		keyOutside(t.queues, keep) || keyOutside(t.fixed, keep) || keyOutside(t.sliding, keep) ||
		keyOutside(t.logs, keep) {
		return fmt.Errorf("%w: a bucket outside %s", ErrCorrupt, keep)
	}
	for _, l := range t.leases {
		if !keep.Contains(l.key) {
			return fmt.Errorf("%w: a lease outside %s", ErrCorrupt, keep)
		}
	}
	return nil
}

// keyOutside reports whether t has a key outside r.
func keyOutside[V any](t map[uint64]V, r Range) bool {
	for h := range t {
		if !r.Contains(h) {
			return true
		}
	}
	return false
}

// merge adds the entries of chunk t to the machine, keeping the lease
// index and the bucket index in step.
func (m *Machine) merge(t *Machine) {
	m.now, m.nextLease = max(m.now, t.now), max(m.nextLease, t.nextLease)
	mergeInto(m.tokens, t.tokens, &m.index)
	mergeInto(m.leaky, t.leaky, &m.index)
	mergeInto(m.tats, t.tats, &m.index)
	mergeInto(m.queues, t.queues, nil)
	mergeInto(m.fixed, t.fixed, nil)
	mergeInto(m.sliding, t.sliding, nil)
	mergeInto(m.logs, t.logs, nil)
	mergeInto(m.idem, t.idem, nil)
	for _, id := range slices.Sorted(maps.Keys(t.leases)) {
		l := t.leases[id]
		if old, ok := m.leases[id]; ok {
			// Cannot happen between chunks of one frozen copy, whose lease
			// IDs are unique; keep the indexes right if it does.
			m.unindexLease(id, old.key)
		}
		m.leases[id] = l
		ids, ok := m.byKey[l.key]
		if !ok {
			m.index.add(l.key)
		}
		ids = append(ids, id)
		slices.Sort(ids)
		m.byKey[l.key] = ids
	}
	for scope, cs := range t.credits {
		merged := append(slices.Clone(m.credits[scope]), cs...)
		slices.Sort(merged)
		m.credits[scope] = merged
	}
}

// unindexLease takes lease id off bucket h's lease list.
func (m *Machine) unindexLease(id, h uint64) {
	ids := slices.DeleteFunc(m.byKey[h], func(x uint64) bool { return x == id })
	if len(ids) == 0 {
		drop(&m.index, m.byKey, h)
	} else {
		m.byKey[h] = ids
	}
}

func mergeInto[V any](dst, src map[uint64]V, x *bucketIndex) {
	for h, v := range src {
		put(x, dst, h, v)
	}
}
