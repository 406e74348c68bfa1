package fsm

import "math/bits"

// bucketIndex is a counting Bloom filter of the buckets a credit must not
// be spent on: every key hash in the tables tokens, leaky, tats and byKey.
// The machine updates it in O(1) wherever it adds a key to one of those
// tables or deletes one, so a credit's filter is a copy of its bits
// (bucketIndex.filter), whatever the number of buckets, where it used to
// be a pass over every bucket inside Apply.
//
// It holds a superset of the buckets that exist: entries that have expired
// but that the sweeper has not deleted yet are in it, so replicas, whose
// sweepers run at different times, hold different indexes. That is safe
// because nothing replicated depends on it: it only shapes a credit's
// Result, and a credit may be spent only on keys its filter leaves out,
// which exist in no table. It is not in the snapshot; Restore rebuilds it.
//
// Counters are 4 bits and saturate: a saturated counter is never lowered
// (it no longer knows how many keys it counts), so its bit stays set,
// which only adds false positives. With 2^20 counters and 7 probes, a
// counter reaches 15 about once in 10^9 at 2^18 keys.
type bucketIndex struct {
	counts []byte   // two 4-bit counters a byte; nil until the first add
	bits   []uint64 // position p set while its counter is above zero
}

const (
	indexLog2   = 20 // 2^20 positions: 1% false positives at 100k buckets
	indexSize   = 1 << indexLog2
	indexSat    = 15 // a counter at this value stays there
	indexMinLen = 1  // words in the smallest filter a credit carries
)

func (x *bucketIndex) add(h uint64) {
	if x.counts == nil {
		x.counts, x.bits = make([]byte, indexSize/2), make([]uint64, indexSize/64)
	}
	for i := range uint64(filterProbes) {
		p := probe(h, i) & (indexSize - 1)
		if c := x.count(p); c < indexSat {
			x.setCount(p, c+1)
		}
		x.bits[p/64] |= 1 << (p % 64)
	}
}

func (x *bucketIndex) remove(h uint64) {
	if x.counts == nil {
		return
	}
	for i := range uint64(filterProbes) {
		p := probe(h, i) & (indexSize - 1)
		switch c := x.count(p); c {
		case 0, indexSat: // 0 cannot happen while adds and removes pair up
		case 1:
			x.setCount(p, 0)
			x.bits[p/64] &^= 1 << (p % 64)
		default:
			x.setCount(p, c-1)
		}
	}
}

func (x *bucketIndex) count(p uint64) byte { return x.counts[p/2] >> (p % 2 * 4) & 0xf }

func (x *bucketIndex) setCount(p uint64, c byte) {
	shift := p % 2 * 4
	x.counts[p/2] = x.counts[p/2]&^(0xf<<shift) | c<<shift
}

// filter returns a credit's filter of the index, folded to about
// filterBitsPerKey bits for each of n keys: positions are taken modulo a
// power of two, so OR-ing the halves of the bit array gives exactly the
// filter that adding the same keys at half the size would.
func (x *bucketIndex) filter(n int) Filter {
	words := indexMinLen
	if want := (n*filterBitsPerKey + 63) / 64; want > 1 {
		words = min(indexSize/64, 1<<bits.Len(uint(want-1)))
	}
	f := Filter{words: make([]uint64, words), k: filterProbes}
	for i := 0; i < len(x.bits); i += words {
		for j, w := range x.bits[i : i+words] {
			f.words[j] |= w
		}
	}
	return f
}

// rebuildIndex builds the index from the tables, after a restore.
func (m *Machine) rebuildIndex() {
	m.index = bucketIndex{}
	for h := range m.tokens {
		m.index.add(h)
	}
	for h := range m.leaky {
		m.index.add(h)
	}
	for h := range m.tats {
		m.index.add(h)
	}
	for h := range m.byKey {
		m.index.add(h)
	}
}

// indexed is how many keys the index holds (a key in two tables counts
// twice): what a credit's filter is sized for.
func (m *Machine) indexed() int {
	return len(m.tokens) + len(m.leaky) + len(m.tats) + len(m.byKey)
}

// put stores v under h in t, adding h to x (if not nil) when it is new.
func put[V any](x *bucketIndex, t map[uint64]V, h uint64, v V) {
	if _, ok := t[h]; !ok && x != nil {
		x.add(h)
	}
	t[h] = v
}

// drop deletes h from t, and from x (if not nil) when it was there.
func drop[V any](x *bucketIndex, t map[uint64]V, h uint64) {
	if _, ok := t[h]; ok && x != nil {
		x.remove(h)
	}
	delete(t, h)
}
