package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
)

// Snapshot format, version 4:
//
//	"QSNP" version:byte now:varint nextLease:uvarint
//	nine tables, each count:uvarint then entries sorted by key (a
//	sliding log: exp, then count:uvarint runs of time:varint units:varint)
//	credits: scopes:uvarint, then per scope in order: scope:string
//	count:uvarint expiry times (varint), ascending
//	(leases also carry their bucket's scope)
//	split state (split.go): owned lo:u64 hi:u64 (0 0: every hash)
//	loading:byte nextSeq:uvarint frozen:byte, and when frozen is 1:
//	move lo:u64 hi:u64 size:uvarint then the frozen copy's own snapshot
//	(which has no frozen copy) of size bytes
//	crc32c of everything before it: 4 bytes little-endian
//
// Version 3 is version 4 without the split state (a group that never
// split); version 2 also stores a sliding log as one time per unit instead
// of runs (time, count), and version 1 is version 2 without credits. All
// still restore.
//
// Expired entries are left out and entries are sorted, so two machines fed
// the same commands write the same bytes whatever their sweepers did.

var (
	snapshotMagic = [4]byte{'Q', 'S', 'N', 'P'}
	castagnoli    = crc32.MakeTable(crc32.Castagnoli)
)

const snapshotVersion = 4

// Snapshot writes the machine's state to w.
func (m *Machine) Snapshot(w io.Writer) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriter(io.MultiWriter(w, crc))
	e := &encoder{w: bw}
	e.raw(snapshotMagic[:])
	e.raw([]byte{snapshotVersion})
	e.varint(m.now)
	e.uvarint(m.nextLease)
	now := m.now
	writeTable(e, m.tokens, now, tbDead, encodeTB)
	writeTable(e, m.leaky, now, tbDead, encodeTB)
	writeTable(e, m.tats, now, tatDead, func(e *encoder, v int64) { e.varint(v) })
	writeTable(e, m.queues, now, tatDead, func(e *encoder, v int64) { e.varint(v) })
	writeTable(e, m.fixed, now, fwDead, func(e *encoder, s fwState) { e.varint(s.end); e.varint(s.count) })
	writeTable(e, m.sliding, now, swDead, func(e *encoder, s swState) {
		e.varint(s.start)
		e.varint(s.cur)
		e.varint(s.prev)
		e.varint(s.exp)
	})
	writeTable(e, m.logs, now, logDead, func(e *encoder, s *logState) {
		e.varint(s.exp)
		e.uvarint(uint64(len(s.live())))
		for _, r := range s.live() {
			e.varint(r.at)
			e.varint(r.n)
		}
	})
	writeTable(e, m.leases, now, leaseDead, func(e *encoder, l *lease) {
		e.u64(l.key)
		e.buf = appendString(e.buf[:0], l.scope)
		e.raw(e.buf)
		e.buf = appendLimit(e.buf[:0], l.limit)
		e.raw(e.buf)
		e.buf = appendString(e.buf[:0], l.holder)
		e.raw(e.buf)
		e.varint(l.amount)
		e.varint(l.expires)
	})
	writeTable(e, m.idem, now, idemDead, func(e *encoder, v idemEntry) {
		e.varint(v.exp)
		e.buf = appendResult(e.buf[:0], &v.result)
		e.raw(e.buf)
	})
	writeCredits(e, m.credits, now)
	e.u64(m.owned.Lo)
	e.u64(m.owned.Hi)
	e.raw([]byte{boolByte(m.loading)})
	e.uvarint(m.nextSeq)
	e.raw([]byte{boolByte(m.frozen != nil)})
	if f := m.frozen; f != nil {
		var nested bytes.Buffer
		if err := f.m.Snapshot(&nested); err != nil {
			return err
		}
		e.u64(f.move.Lo)
		e.u64(f.move.Hi)
		e.uvarint(uint64(nested.Len()))
		e.raw(nested.Bytes())
	}
	if e.err != nil {
		return e.err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

// writeCredits writes the credit expiries still remembered at now; older
// ones no longer count (deficit), so leaving them out keeps snapshots
// equal.
func writeCredits(e *encoder, credits map[string][]int64, now int64) {
	live := map[string][]int64{}
	for scope, cs := range credits {
		if cs = remembered(cs, now); len(cs) > 0 {
			live[scope] = cs
		}
	}
	scopes := slices.Sorted(maps.Keys(live))
	e.uvarint(uint64(len(scopes)))
	for _, scope := range scopes {
		e.buf = appendString(e.buf[:0], scope)
		e.raw(e.buf)
		e.uvarint(uint64(len(live[scope])))
		for _, at := range live[scope] {
			e.varint(at)
		}
	}
}

func encodeTB(e *encoder, s tbState) {
	e.varint(s.anchor)
	e.uvarint(s.packed)
}

func writeTable[V any](e *encoder, t map[uint64]V, now int64, dead func(V, int64) bool, put func(*encoder, V)) {
	keys := make([]uint64, 0, len(t))
	for k, v := range t {
		if !dead(v, now) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.u64(k)
		put(e, t[k])
	}
}

// Restore replaces the machine's state with the snapshot read from r. On any
// error the machine is left exactly as it was.
func (m *Machine) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("fsm: reading snapshot: %w", err)
	}
	if len(b) < len(snapshotMagic)+1+4 || [4]byte(b[:4]) != snapshotMagic {
		return fmt.Errorf("%w: not a snapshot", ErrCorrupt)
	}
	version := b[4]
	if version < 1 || version > snapshotVersion {
		return fmt.Errorf("%w: snapshot version %d", ErrVersion, version)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return fmt.Errorf("%w: snapshot checksum mismatch", ErrCorrupt)
	}
	fresh := New(m.cfg)
	if err := fresh.decodeSnapshot(body[5:], version); err != nil {
		return err
	}
	fresh.sweepNext = m.sweepNext
	*m = *fresh
	return nil
}

func (m *Machine) decodeSnapshot(b []byte, version byte) error {
	d := &decoder{b: b}
	m.now = d.varint()
	m.nextLease = d.uvarint()
	readTable(d, m.tokens, 2, decodeTB)
	readTable(d, m.leaky, 2, decodeTB)
	readTable(d, m.tats, 1, func(d *decoder) int64 { return d.varint() })
	readTable(d, m.queues, 1, func(d *decoder) int64 { return d.varint() })
	readTable(d, m.fixed, 2, func(d *decoder) fwState { return fwState{end: d.varint(), count: d.varint()} })
	readTable(d, m.sliding, 4, func(d *decoder) swState {
		return swState{start: d.varint(), cur: d.varint(), prev: d.varint(), exp: d.varint()}
	})
	readTable(d, m.logs, 2, func(d *decoder) *logState { return readLog(d, version) })
	readTable(d, m.leases, 15, func(d *decoder) *lease {
		l := &lease{key: d.u64()}
		if version >= 2 {
			l.scope = d.string(MaxKeyLen)
		}
		l.limit, l.holder, l.amount, l.expires = d.limit(), d.string(MaxHolderLen), d.varint(), d.varint()
		if d.err == nil && (l.limit.Validate() != nil || !l.limit.Algorithm.Leasable() || l.amount < 0) {
			d.fail() // a lease must be creditable without surprises
		}
		return l
	})
	readTable(d, m.idem, 11, func(d *decoder) idemEntry { return idemEntry{exp: d.varint(), result: d.result()} })
	if version >= 2 {
		readCredits(d, m.credits)
	}
	if version >= 4 {
		m.readSplit(d)
	}
	for id, l := range m.leases {
		if id == 0 || id >= m.nextLease {
			d.fail() // a later grant would overwrite it
		}
		m.byKey[l.key] = append(m.byKey[l.key], id)
	}
	for _, ids := range m.byKey {
		slices.Sort(ids)
	}
	m.rebuildIndex() // O(buckets), at restore only
	return d.finish()
}

// readSplit reads the split state, and checks that it is one a machine
// can reach: an owned range written out, loading only while adopting, a
// frozen copy only beside the range it was cut from.
func (m *Machine) readSplit(d *decoder) {
	m.owned = Range{d.u64(), d.u64()}
	loading := d.byte()
	m.nextSeq = d.uvarint()
	hasFrozen := d.byte()
	m.loading = loading == 1
	if d.err == nil && (loading > 1 || hasFrozen > 1 || m.owned != m.owned.normal() ||
		!m.owned.IsZero() && !m.owned.proper() || m.loading && (m.nextSeq == 0 || m.owned.IsZero())) {
		d.fail()
	}
	if hasFrozen != 1 || d.err != nil {
		return
	}
	move := Range{d.u64(), d.u64()}
	n := d.uvarint()
	if d.err == nil && (n > uint64(len(d.b)) || m.owned.IsZero() || m.loading || !adjacent(m.owned, move)) {
		d.fail()
	}
	if d.err != nil {
		return
	}
	f := New(m.cfg)
	if err := f.Restore(bytes.NewReader(d.b[:n])); err != nil || f.frozen != nil || !f.owned.IsZero() || f.loading || f.nextSeq != 0 {
		d.fail()
		return
	}
	d.b = d.b[n:]
	m.frozen = &Frozen{move: move, m: f}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// readCredits reads the credits of each scope: scopes ascending and unique,
// expiries ascending.
func readCredits(d *decoder, credits map[string][]int64) {
	n := d.count(1<<20, 2)
	prev := ""
	for i := range n {
		scope := d.string(MaxKeyLen)
		if d.err == nil && i > 0 && scope <= prev {
			d.fail()
		}
		prev = scope
		k := d.count(1<<20, 1)
		var cs []int64
		for range k {
			at := d.varint()
			if d.err == nil && len(cs) > 0 && at < cs[len(cs)-1] {
				d.fail()
			}
			cs = append(cs, at)
		}
		if d.err != nil {
			return
		}
		if len(cs) > 0 {
			credits[scope] = cs
		}
	}
}

// readLog reads a sliding log: runs (time, count) since version 3, one
// time per unit before, which restores as runs of one.
func readLog(d *decoder, version byte) *logState {
	s := &logState{exp: d.varint()}
	n := d.count(MaxLogLimit, 1)
	if n > 0 {
		s.runs = make([]logRun, 0, n)
	}
	for range n {
		r := logRun{at: d.varint(), n: 1}
		if version >= 3 {
			r.n = d.varint()
		}
		if d.err == nil && (r.n <= 0 || r.n > MaxLogLimit || s.count+r.n > MaxLogLimit) {
			d.fail()
		}
		if d.err != nil {
			return s
		}
		s.add(r.at, r.n)
	}
	return s
}

func decodeTB(d *decoder) tbState {
	return tbState{anchor: d.varint(), packed: d.uvarint()}
}

// readTable reads one table; minSize is the fewest bytes a value takes.
func readTable[V any](d *decoder, t map[uint64]V, minSize int, get func(*decoder) V) {
	n := d.count(1<<40, 8+minSize)
	prev, first := uint64(0), true
	for range n {
		k := d.u64()
		if !first && k <= prev { // keys are written sorted and unique
			d.fail()
		}
		v := get(d)
		if d.err != nil {
			return
		}
		t[k], prev, first = v, k, false
	}
}

// encoder writes varints to a buffered writer, remembering the first error.
type encoder struct {
	w   *bufio.Writer
	buf []byte
	tmp [binary.MaxVarintLen64]byte
	err error
}

func (e *encoder) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *encoder) varint(v int64)   { e.raw(binary.AppendVarint(e.tmp[:0], v)) }
func (e *encoder) uvarint(v uint64) { e.raw(binary.AppendUvarint(e.tmp[:0], v)) }
func (e *encoder) u64(v uint64)     { e.raw(binary.LittleEndian.AppendUint64(e.tmp[:0], v)) }
