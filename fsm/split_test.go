package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// splitKeys are keys spread over the hash space, half in credit scope "a".
var splitKeys = func() []string {
	var ks []string
	for i := range 12 {
		ks = append(ks, fmt.Sprint("k", i), fmt.Sprint("a\x00k", i))
	}
	return ks
}()

// splitLimit is key i's limit: every algorithm, state carried from one op
// to the next.
func splitLimit(i int) Limit {
	n := int64(i)
	return Limit{Algorithm: Algorithm(1 + n%int64(numAlgorithms-1)), Limit: 8 + 3*n, Period: time.Duration(1+n%3) * 300 * time.Millisecond, Burst: n % 5}
}

// splitLease is what the test knows of a lease the reference granted: its
// bucket, and its ID in the group that holds it (the parent, or after the
// fence the side of its bucket: moved leases keep their IDs).
type splitLease struct {
	key string
	id  uint64
}

// splitRun drives a reference machine R that never splits, and a parent P
// that splits into a child C partway, with the same ops, routed by hash.
type splitRun struct {
	t          *testing.T
	r          *rand.Rand
	ref, p, c  *Machine
	keep, move Range
	fenced     bool
	adopting   bool // chunks of the fence are being adopted by C
	adopted    bool // C serves move
	leases     map[uint64]splitLease
	ids        []uint64 // reference lease IDs, recent last
	where      string
}

func (s *splitRun) sideOf(key string) *Machine {
	if !s.fenced || s.keep.Contains(hashOf(key)) {
		return s.p
	}
	return s.c
}

// genOp is one random op over splitKeys, naming reference lease IDs.
func (s *splitRun) genOp(now int64) Op {
	r := s.r
	i := r.IntN(len(splitKeys))
	l := splitLimit(i / 2)
	op := Op{Kind: OpKind(1 + r.IntN(int(numOps)-1)), Key: splitKeys[i], Limit: l, Cost: r.Int64N(l.Capacity() + 1), Group: uint32(r.IntN(3))}
	lease := uint64(0)
	if len(s.ids) > 0 {
		lease = s.ids[r.IntN(len(s.ids))]
	}
	switch op.Kind {
	case OpTake:
		if r.IntN(3) == 0 {
			op.IdempotencyKey = fmt.Sprint("i", r.IntN(4))
		}
	case OpRefund:
		op.At = now - r.Int64N(int64(time.Second))
		if r.IntN(4) == 0 {
			op.IdempotencyKey = fmt.Sprint("i", r.IntN(4))
		}
	case OpGrant, OpCredit:
		op.Holder, op.TTL = fmt.Sprint("n", r.IntN(3)), time.Duration(1+r.IntN(30))*100*time.Millisecond
		if op.Kind == OpCredit {
			op.Key = CreditScope(op.Key)
		} else if r.IntN(2) == 0 {
			op.Lease, op.Held = lease, r.Int64N(4)
		}
	case OpReturn:
		op.Lease, op.Held = lease, r.Int64N(3)
	}
	return op
}

// translate is op as machine m knows it: the reference's lease ID replaced
// by m's, or by 0 where m holds no such lease of the op's bucket.
func (s *splitRun) translate(op Op, m *Machine) Op {
	if op.Lease == 0 {
		return op
	}
	l, ok := s.leases[op.Lease]
	if !ok || s.sideOf(l.key) != m || op.Kind == OpGrant && l.key != op.Key {
		op.Lease = 0
		return op
	}
	op.Lease = l.id
	return op
}

// route says which machines decide op (none: nobody, the reference
// included, sees it) and which machine, if any, must refuse it.
func (s *splitRun) route(op Op) (decide []*Machine, refuse *Machine) {
	loading := s.c.loading // C refuses everything; before it began, it owns all and must see nothing
	switch {
	case op.Kind == OpCredit:
		switch {
		case !s.fenced:
			return []*Machine{s.p}, nil
		case s.adopted:
			return []*Machine{s.p, s.c}, nil // each charges its own buckets
		case loading:
			return nil, s.c
		}
		return nil, nil // the reference would charge C's buckets for it
	case op.Kind == OpReturn:
		l, ok := s.leases[op.Lease]
		if !ok {
			return []*Machine{s.p}, nil
		}
		if m := s.sideOf(l.key); m == s.p || s.adopted {
			return []*Machine{m}, nil
		}
		if loading {
			return nil, s.c
		}
		return nil, nil
	}
	if m := s.sideOf(op.Key); m == s.p || s.adopted {
		return []*Machine{m}, nil
	}
	if loading {
		return nil, s.c
	}
	return nil, nil
}

// step applies one random command to every machine and compares results.
func (s *splitRun) step(now int64) {
	t, r := s.t, s.r
	var ops []Op
	for range r.IntN(6) {
		ops = append(ops, s.genOp(now))
	}
	if s.fenced {
		// All-or-nothing runs cannot span groups: keep each run on one
		// side, and number runs apart so that no two merge once split.
		for i := 0; i < len(ops); {
			j, sides := i, map[*Machine]bool{}
			for ; j < len(ops) && ops[j].Group == ops[i].Group; j++ {
				ms, _ := s.route(ops[j])
				for _, m := range ms {
					sides[m] = true
				}
			}
			for k := i; k < j; k++ {
				switch {
				case ops[k].Group == 0:
				case len(sides) > 1:
					ops[k].Group = 0
				default:
					ops[k].Group = uint32(i + 1)
				}
			}
			i = j
		}
	}
	type slot struct {
		m *Machine
		i int
	}
	var refOps []Op
	side := map[*Machine][]Op{}
	refused := map[*Machine][]Op{} // sent after the others, outside any group
	var slots [][]slot             // per reference op
	for _, op := range ops {
		ms, refuse := s.route(op)
		if refuse != nil {
			o := s.translate(op, refuse)
			o.Group = 0
			refused[refuse] = append(refused[refuse], o)
		}
		if len(ms) == 0 {
			continue
		}
		refOps = append(refOps, op)
		var sl []slot
		for _, m := range ms {
			side[m] = append(side[m], s.translate(op, m))
			sl = append(sl, slot{m, len(side[m]) - 1})
		}
		slots = append(slots, sl)
		if s.adopted && op.Kind != OpCredit && op.Kind != OpReturn && r.IntN(4) == 0 {
			// The same op at the wrong group: refused, changes nothing.
			wrong := s.p
			if ms[0] == s.p {
				wrong = s.c
			}
			o := s.translate(op, wrong)
			o.Group = 0
			refused[wrong] = append(refused[wrong], o)
		}
	}
	want := s.ref.Apply(&Command{Now: now, Ops: refOps}, nil)
	got := map[*Machine][]Result{}
	for _, m := range []*Machine{s.p, s.c} {
		if m == s.c && !s.fenced {
			continue
		}
		n := len(side[m])
		rs := m.Apply(&Command{Now: now, Ops: append(side[m], refused[m]...)}, nil)
		for i, res := range rs[n:] {
			op := &refused[m][i]
			if valid := op.validate(m.cfg) == nil; res.Allowed || res.Err == nil || valid && !errors.Is(res.Err, ErrMoved) {
				t.Fatalf("%s: op %+v at a group that does not serve it: %+v, want ErrMoved", s.where, *op, res)
			}
		}
		got[m] = rs[:n]
	}
	for i, op := range refOps {
		w := want[i]
		for _, sl := range slots[i] {
			g := got[sl.m][sl.i]
			if op.Kind == OpCredit && g.Err == nil {
				wantRange := Range{}
				if s.fenced {
					wantRange = s.keep
					if sl.m == s.c {
						wantRange = s.move
					}
				}
				if g.Range != wantRange {
					t.Fatalf("%s: credit range %s, want %s", s.where, g.Range, wantRange)
				}
			}
			if strip(w) != strip(g) {
				t.Fatalf("%s: op %d %+v\nreference: %+v\nsplit:     %+v", s.where, i, op, w, g)
			}
			if w.Lease != 0 {
				s.leases[w.Lease] = splitLease{key: op.Key, id: g.Lease}
			}
		}
		if w.Lease != 0 {
			s.ids = append(s.ids[max(0, len(s.ids)-9):], w.Lease)
		}
	}
}

// strip is a result without what differs between groups by design: lease
// IDs (each group numbers its own), credit filters (each group's index)
// and ranges (checked apart).
func strip(r Result) string {
	r.Lease, r.Filter, r.Range = 0, Filter{}, Range{}
	return fmt.Sprintf("%+v", r)
}

// restored is m through its own snapshot, which must encode alike after.
func restored(t *testing.T, m *Machine, where string) *Machine {
	t.Helper()
	b := snapshotBytes(t, m)
	fresh := New(Config{})
	if err := fresh.Restore(bytes.NewReader(b)); err != nil {
		t.Fatalf("%s: restore: %v", where, err)
	}
	if !bytes.Equal(b, snapshotBytes(t, fresh)) {
		t.Fatalf("%s: a restored machine snapshots differently", where)
	}
	if !reflect.DeepEqual(fresh.Split(), m.Split()) {
		t.Fatalf("%s: split state %+v restored as %+v", where, m.Split(), fresh.Split())
	}
	return fresh
}

// holdsOnly checks that m holds no bucket or lease outside r, and that
// its bucket index is the one its tables give.
func holdsOnly(t *testing.T, m *Machine, r Range, where string) {
	t.Helper()
	var keys []uint64
	for _, t := range []map[uint64]tbState{m.tokens, m.leaky} {
		keys = slices.AppendSeq(keys, maps.Keys(t))
	}
	for _, t := range []map[uint64]int64{m.tats, m.queues} {
		keys = slices.AppendSeq(keys, maps.Keys(t))
	}
	keys = slices.AppendSeq(keys, maps.Keys(m.fixed))
	keys = slices.AppendSeq(keys, maps.Keys(m.sliding))
	keys = slices.AppendSeq(keys, maps.Keys(m.logs))
	keys = slices.AppendSeq(keys, maps.Keys(m.byKey))
	for _, l := range m.leases {
		keys = append(keys, l.key)
	}
	for _, h := range keys {
		if !r.Contains(h) {
			t.Fatalf("%s: a machine that owns %s holds state of hash %#x", where, r, h)
		}
	}
	checkIndex(t, m, where)
}

func mustControl(t *testing.T, m *Machine, c *Control, where string) {
	t.Helper()
	if err := m.ApplyControl(c); err != nil {
		t.Fatalf("%s: %s: %v", where, c.Kind, err)
	}
}

// TestSplitDecidesLikeOneGroup is the property that makes a split exact: a
// parent P that fences part of its range, a child C that adopts it chunk
// by chunk, and a reference R that never splits, fed the same random
// stream of takes, peeks, refunds, resets, idempotent takes, grants,
// renewals, returns and credits over every algorithm, each op routed to P
// or C by its key's hash, must decide every op alike. Ops at the wrong
// group, and ops on the child's range while it loads, are refused with
// ErrMoved; repeated controls are no-ops; P and C are restored from their
// snapshots at random points, mid-adoption included.
func TestSplitDecidesLikeOneGroup(t *testing.T) {
	defer func(n int) { chunkEntries = n }(chunkEntries)
	chunkEntries = 5 // several chunks
	for seed := range raceScaled(24) {
		r := rand.New(rand.NewPCG(seed, 77))
		s := &splitRun{t: t, r: r, ref: New(Config{}), p: New(Config{}), c: New(Config{}), leases: map[uint64]splitLease{}}
		times := randomTimes(r, 600, 200*time.Millisecond)
		fenceAt := 50 + r.IntN(300)
		releaseAt := fenceAt + 20 + r.IntN(100)
		var seq uint64
		for i, now := range times {
			s.where = fmt.Sprint("seed ", seed, " step ", i)
			switch {
			case i == fenceAt:
				split := 1 + r.Uint64N(math.MaxUint64-1)
				s.keep, s.move = Range{0, split - 1}, Range{split, math.MaxUint64}
				if r.IntN(2) == 0 {
					s.keep, s.move = Range{split, math.MaxUint64}, Range{0, split - 1}
				}
				fence := &Control{Kind: CtlFence, Keep: s.keep, Move: s.move}
				mustControl(t, s.p, fence, s.where)
				before := snapshotBytes(t, s.p)
				mustControl(t, s.p, fence, s.where+" again")
				if !bytes.Equal(before, snapshotBytes(t, s.p)) {
					t.Fatalf("%s: a repeated fence changed the parent", s.where)
				}
				s.fenced, s.adopting = true, true
				holdsOnly(t, s.p, s.keep, s.where)
			case s.adopting:
				// One chunk per step, from a restored copy of P half the
				// time: any replica exports the same chunks.
				src := s.p
				if r.IntN(2) == 0 {
					src = restored(t, s.p, s.where)
				}
				chunk, last, err := src.ExportChunk(seq)
				if err != nil {
					t.Fatalf("%s: export %d: %v", s.where, seq, err)
				}
				if again, _, _ := s.p.ExportChunk(seq); !bytes.Equal(chunk, again) {
					t.Fatalf("%s: chunk %d differs between replicas", s.where, seq)
				}
				adopt := &Control{Kind: CtlAdopt, Keep: s.move, Seq: seq, Last: last, Chunk: chunk}
				mustControl(t, s.c, adopt, s.where)
				before := snapshotBytes(t, s.c)
				mustControl(t, s.c, adopt, s.where+" retry")
				if !bytes.Equal(before, snapshotBytes(t, s.c)) {
					t.Fatalf("%s: a repeated chunk changed the child", s.where)
				}
				if err := s.c.ApplyControl(&Control{Kind: CtlAdopt, Keep: s.move, Seq: seq + 2, Chunk: chunk}); err == nil {
					t.Fatalf("%s: chunk %d out of order accepted", s.where, seq+2)
				}
				holdsOnly(t, s.c, s.move, s.where)
				seq++
				if last {
					s.adopting, s.adopted = false, true
					if _, _, err := s.p.ExportChunk(seq); err == nil {
						t.Fatalf("%s: export past the last chunk", s.where)
					}
				}
			case i == releaseAt && s.adopted:
				rel := &Control{Kind: CtlRelease, Move: s.move}
				mustControl(t, s.p, rel, s.where)
				mustControl(t, s.p, rel, s.where+" again")
				if info := s.p.Split(); !info.Frozen.IsZero() || info.Owned != s.keep {
					t.Fatalf("%s: after release %+v", s.where, info)
				}
				if _, _, err := s.p.ExportChunk(0); err == nil {
					t.Fatalf("%s: export after release", s.where)
				}
				mustControl(t, s.p, &Control{Kind: CtlFence, Keep: s.keep, Move: s.move}, s.where+" fence after release")
			}
			if r.IntN(40) == 0 {
				s.p = restored(t, s.p, s.where)
				if s.fenced {
					s.c = restored(t, s.c, s.where)
				}
			}
			s.step(now)
		}
		if !s.adopted {
			t.Fatalf("seed %d: the adoption never finished", seed)
		}
	}
}

// splitAt fences p at split (keeping the hashes below it), adopts every
// chunk into a fresh child and returns the child.
func splitAt(t *testing.T, p *Machine, split uint64) (c *Machine, keep, move Range) {
	t.Helper()
	keep, move = Range{0, split - 1}, Range{split, math.MaxUint64}
	mustControl(t, p, &Control{Kind: CtlFence, Keep: keep, Move: move}, "fence")
	c = New(Config{})
	for seq := uint64(0); ; seq++ {
		chunk, last, err := p.ExportChunk(seq)
		if err != nil {
			t.Fatal(err)
		}
		mustControl(t, c, &Control{Kind: CtlAdopt, Keep: move, Seq: seq, Last: last, Chunk: chunk}, "adopt")
		if last {
			return c, keep, move
		}
	}
}

// keyIn is a key of scope "a" whose hash r contains.
func keyIn(r Range) string {
	for i := 0; ; i++ {
		if k := fmt.Sprint("a\x00fresh", i); r.Contains(hashOf(k)) {
			return k
		}
	}
}

// TestSplitCredits: a credit granted after the fence carries the group's
// range, and the child charges its fresh buckets for the credits the
// parent granted before the fence, exactly as the unsplit group would.
func TestSplitCredits(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 1000, Period: time.Second}
	credit := Op{Kind: OpCredit, Key: "a", Holder: "n1", TTL: 5 * time.Second}
	ref, p := New(Config{}), New(Config{})
	for _, m := range []*Machine{ref, p} {
		if r := m.Apply(&Command{Now: t0, Ops: []Op{credit, credit}}, nil); !r[0].Allowed || !r[0].Range.IsZero() {
			t.Fatalf("credit before the fence: %+v", r[0])
		}
	}
	c, keep, move := splitAt(t, p, 1<<63)
	now := t0 + int64(time.Second)
	for _, tc := range []struct {
		m     *Machine
		owned Range
	}{{p, keep}, {c, move}} {
		r := tc.m.Apply(&Command{Now: now, Ops: []Op{credit}}, nil)[0]
		if !r.Allowed || r.Range != tc.owned {
			t.Fatalf("credit after the fence: %+v, want range %s", r, tc.owned)
		}
	}
	ref.Apply(&Command{Now: now, Ops: []Op{credit}}, nil)
	k := keyIn(move)
	want := ref.Apply(&Command{Now: now, Ops: []Op{{Kind: OpTake, Key: k, Limit: l, Cost: 1}}}, nil)[0]
	got := c.Apply(&Command{Now: now, Ops: []Op{{Kind: OpTake, Key: k, Limit: l, Cost: 1}}}, nil)[0]
	if want.Remaining >= l.Capacity()-1 {
		t.Fatalf("the reference's fresh bucket is not charged for credits: %+v", want)
	}
	if strip(got) != strip(want) {
		t.Fatalf("a fresh bucket of the child: %+v\nunsplit group:          %+v", got, want)
	}
}

// TestSplitMovedInGroup: an op refused with ErrMoved in an all-or-nothing
// run denies the run, whose other takes are refunded.
func TestSplitMovedInGroup(t *testing.T) {
	p := New(Config{})
	_, keep, move := splitAt(t, p, 1<<63)
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Hour}
	here, there := keyIn(keep), keyIn(move)
	rs := p.Apply(&Command{Now: t0, Ops: []Op{
		{Kind: OpTake, Key: here, Limit: l, Cost: 4, Group: 1},
		{Kind: OpTake, Key: there, Limit: l, Cost: 1, Group: 1},
	}}, nil)
	if !rs[0].Refunded || rs[0].Remaining != 10 || !errors.Is(rs[1].Err, ErrMoved) {
		t.Fatalf("group with a moved key: %+v", rs)
	}
	for _, op := range []Op{
		{Kind: OpPeek, Key: there, Limit: l},
		{Kind: OpRefund, Key: there, Limit: l, Cost: 1},
		{Kind: OpReset, Key: there},
		{Kind: OpGrant, Key: there, Limit: l, Cost: 1, Holder: "n", TTL: time.Second},
	} {
		if r := p.Apply(&Command{Now: t0, Ops: []Op{op}}, nil)[0]; !errors.Is(r.Err, ErrMoved) {
			t.Fatalf("%s of a moved key: %+v", op.Kind, r)
		}
	}
}

// TestSplitControlRefusals: controls that do not fit the split state are
// refused and change nothing.
func TestSplitControlRefusals(t *testing.T) {
	half := uint64(1 << 63)
	lo, hi := Range{0, half - 1}, Range{half, math.MaxUint64}
	l := Limit{Algorithm: GCRA, Limit: 10, Period: time.Second}
	busy := func() *Machine {
		m := New(Config{})
		m.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpTake, Key: keyIn(hi), Limit: l, Cost: 3}}}, nil)
		return m
	}
	fenced := busy()
	mustControl(t, fenced, &Control{Kind: CtlFence, Keep: lo, Move: hi}, "fence")
	chunk, _, err := fenced.ExportChunk(0)
	if err != nil {
		t.Fatal(err)
	}
	loading := New(Config{})
	mustControl(t, loading, &Control{Kind: CtlAdopt, Keep: hi, Seq: 0, Chunk: chunk}, "adopt")
	released := busy()
	mustControl(t, released, &Control{Kind: CtlFence, Keep: lo, Move: hi}, "fence")
	mustControl(t, released, &Control{Kind: CtlRelease, Move: hi}, "release")
	// A group that never split knows no range of its own (the ring gives
	// it one): it splits the range the fence names.
	ringRange := busy()
	mustControl(t, ringRange, &Control{Kind: CtlFence, Keep: Range{half, half + 1<<40}, Move: Range{half + 1<<40 + 1, math.MaxUint64}}, "fence of a ring range")
	if info := ringRange.Split(); info.Owned != (Range{half, half + 1<<40}) {
		t.Fatalf("after fencing a ring range: %+v", info)
	}
	for _, tc := range []struct {
		name string
		m    *Machine
		c    Control
	}{
		{"fence not covering the range", released, Control{Kind: CtlFence, Keep: Range{0, 99}, Move: Range{100, 199}}},
		{"fence of overlapping ranges", busy(), Control{Kind: CtlFence, Keep: Range{0, half}, Move: hi}},
		{"fence of the zero range", busy(), Control{Kind: CtlFence, Keep: Range{}, Move: hi}},
		{"second fence while frozen", fenced, Control{Kind: CtlFence, Keep: Range{0, 99}, Move: Range{100, half - 1}}},
		{"release of another range", fenced, Control{Kind: CtlRelease, Move: lo}},
		{"adoption by a busy group", busy(), Control{Kind: CtlAdopt, Keep: hi, Chunk: chunk}},
		{"adoption of a range the chunk is not in", New(Config{}), Control{Kind: CtlAdopt, Keep: lo, Chunk: chunk}},
		{"garbage chunk", New(Config{}), Control{Kind: CtlAdopt, Keep: hi, Chunk: []byte("QSNP garbage")}},
		{"chunk out of order", loading, Control{Kind: CtlAdopt, Keep: hi, Seq: 2, Chunk: chunk}},
		{"first chunk not first", New(Config{}), Control{Kind: CtlAdopt, Keep: hi, Seq: 1, Chunk: chunk}},
		{"fence while loading", loading, Control{Kind: CtlFence, Keep: Range{half, half + 9}, Move: Range{half + 10, math.MaxUint64}}},
		{"unknown kind", busy(), Control{Kind: numCtls}},
	} {
		before := snapshotBytes(t, tc.m)
		if err := tc.m.ApplyControl(&tc.c); !errors.Is(err, ErrSplit) {
			t.Errorf("%s: %v, want ErrSplit", tc.name, err)
		}
		if !bytes.Equal(before, snapshotBytes(t, tc.m)) {
			t.Errorf("%s: the refused control changed the machine", tc.name)
		}
	}
	if info := loading.Split(); !info.Loading || info.NextSeq != 1 || info.Owned != hi {
		t.Fatalf("loading: %+v", info)
	}
	if r := loading.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpCredit, Key: "", Holder: "n", TTL: time.Second}}}, nil)[0]; !errors.Is(r.Err, ErrMoved) {
		t.Fatalf("credit while loading: %+v", r)
	}
	if info := fenced.Split(); info.Owned != lo || info.Frozen != hi || info.Loading {
		t.Fatalf("fenced: %+v", info)
	}
}

// TestSnapshotVersion3Restores: a snapshot written before splits existed
// restores as a machine that owns every hash.
func TestSnapshotVersion3Restores(t *testing.T) {
	m := New(Config{})
	m.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpTake, Key: "x", Limit: Limit{Algorithm: TokenBucket, Limit: 5, Period: time.Hour}, Cost: 2}}}, nil)
	b := snapshotBytes(t, m)
	// Version 4 of a machine that never split ends in 19 bytes of split
	// state (zero range, not loading, seq 0, nothing frozen) before the CRC.
	body := bytes.Clone(b[:len(b)-4-19])
	if !bytes.Equal(b[len(b)-4-19:len(b)-4], make([]byte, 19)) {
		t.Fatalf("unexpected split state bytes % x", b[len(b)-23:len(b)-4])
	}
	body[4] = 3
	v3 := binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
	r := New(Config{})
	if err := r.Restore(bytes.NewReader(v3)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, r), b) || r.Split() != (SplitInfo{}) {
		t.Fatalf("version 3 restored differently: %+v", r.Split())
	}
}

func TestControlRoundTrip(t *testing.T) {
	for _, c := range []Control{
		{Kind: CtlFence, Keep: Range{0, 41}, Move: Range{42, math.MaxUint64}},
		{Kind: CtlAdopt, Keep: Range{42, math.MaxUint64}, Seq: 7, Last: true, Chunk: []byte("chunk")},
		{Kind: CtlRelease, Move: Range{1, 2}},
	} {
		b := AppendControl(nil, &c)
		if !IsControl(b) || IsControl(AppendCommand(nil, &Command{Now: 1})) {
			t.Fatal("IsControl cannot tell controls from commands")
		}
		got, err := DecodeControl(b)
		if err != nil || !reflect.DeepEqual(*got, c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
		if _, err := DecodeCommand(b); err == nil {
			t.Fatal("a control decodes as a command")
		}
		for i := range len(b) - 1 {
			if _, err := DecodeControl(b[:i]); err == nil {
				t.Fatalf("truncated to %d bytes: decoded", i)
			}
		}
	}
}

func TestResultRangeRoundTrip(t *testing.T) {
	rs := []Result{{Allowed: true, Range: Range{5, 9}, Expires: 3}, {Err: ErrMoved}, {Allowed: true}}
	got, err := DecodeResults(AppendResults(nil, rs))
	if err != nil || !reflect.DeepEqual(got, rs) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
}

// FuzzControl: garbage never panics, and whatever decodes re-encodes to
// the same bytes.
func FuzzControl(f *testing.F) {
	f.Add(AppendControl(nil, &Control{Kind: CtlFence, Keep: Range{0, 9}, Move: Range{10, math.MaxUint64}}))
	f.Add(AppendControl(nil, &Control{Kind: CtlAdopt, Keep: Range{10, math.MaxUint64}, Seq: 3, Last: true, Chunk: []byte{1, 2, 3}}))
	f.Add([]byte{controlMarker})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeControl(b)
		if err != nil {
			return
		}
		if again := AppendControl(nil, c); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded as % x", again)
		}
		New(Config{}).ApplyControl(c)
	})
}

// After a split a parent and its child grant the same lease IDs: a Return
// that names its key and holder and reaches the other group (a holder
// whose routing is behind) must not end that group's lease of the same ID.
func TestSplitReturnFindsOnlyItsLease(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Hour}
	p := New(Config{})
	c, keep, move := splitAt(t, p, 1<<63)
	kp, kc := keyIn(keep), keyIn(move)
	now := t0 + int64(time.Second)
	gp := p.Apply(&Command{Now: now, Ops: []Op{{Kind: OpGrant, Key: kp, Limit: l, Holder: "A", TTL: time.Minute, Cost: 5}}}, nil)[0]
	gc := c.Apply(&Command{Now: now, Ops: []Op{{Kind: OpGrant, Key: kc, Limit: l, Holder: "B", TTL: time.Minute, Cost: 5}}}, nil)[0]
	if gp.Lease != gc.Lease {
		t.Fatalf("parent lease %d, child lease %d: the split should hand out the same IDs on both sides", gp.Lease, gc.Lease)
	}
	for _, ret := range []Op{
		{Kind: OpReturn, Key: kc, Holder: "B", Lease: gc.Lease, Cost: 5}, // the child's lease, at the parent
		{Kind: OpReturn, Key: kp, Holder: "B", Lease: gc.Lease, Cost: 5}, // right key, wrong holder
	} {
		if r := p.Apply(&Command{Now: now, Ops: []Op{ret}}, nil)[0]; r.Allowed {
			t.Errorf("return %+v at the parent found a lease: %+v", ret, r)
		}
	}
	if peek := p.Apply(&Command{Now: now, Ops: []Op{{Kind: OpPeek, Key: kp, Limit: l}}}, nil)[0]; peek.Remaining != 5 {
		t.Errorf("the parent's bucket has %d left while A holds 5 of 10: a return of another lease credited it", peek.Remaining)
	}
	if r := p.Apply(&Command{Now: now, Ops: []Op{{Kind: OpReturn, Key: kp, Holder: "A", Lease: gp.Lease, Cost: 5}}}, nil)[0]; !r.Allowed || r.Granted != 5 {
		t.Errorf("A's own return: %+v", r)
	}
}

// Credits are cut into chunks like buckets: a group with thousands of
// limit names (credit scopes) exports them in chunks that each stay near
// chunkBytes, far below what a log entry may carry.
func TestSplitChunksCredits(t *testing.T) {
	m := New(Config{})
	cmd := Command{Now: t0}
	for i := range 20000 {
		cmd.Ops = append(cmd.Ops, Op{Kind: OpCredit, Key: fmt.Sprintf("limit-name-%05d", i), Holder: "n1", TTL: time.Minute})
	}
	for i, r := range m.Apply(&cmd, nil) {
		if !r.Allowed || r.Err != nil {
			t.Fatalf("credit %d: %+v", i, r)
		}
	}
	mustControl(t, m, &Control{Kind: CtlFence, Keep: Range{0, 1<<63 - 1}, Move: Range{1 << 63, math.MaxUint64}}, "fence")
	c := New(Config{})
	chunks := 0
	for seq := uint64(0); ; seq++ {
		chunk, last, err := m.ExportChunk(seq)
		if err != nil {
			t.Fatal(err)
		}
		if len(chunk) > 2*chunkBytes {
			t.Fatalf("chunk %d is %d bytes, more than twice chunkBytes (%d)", seq, len(chunk), chunkBytes)
		}
		mustControl(t, c, &Control{Kind: CtlAdopt, Keep: Range{1 << 63, math.MaxUint64}, Seq: seq, Last: last, Chunk: chunk}, "adopt")
		chunks++
		if last {
			break
		}
	}
	if chunks < 2 {
		t.Fatalf("20,000 scopes' credits in %d chunk", chunks)
	}
	if len(c.credits) != 20000 {
		t.Fatalf("the child charges %d scopes' credits, want 20000", len(c.credits))
	}
}
