package fsm

import (
	"encoding/binary"
	"slices"
)

// Filter is a Bloom filter over bucket key hashes: MayContain never says
// false for a hash that was added. A credit carries one of the buckets
// that existed when it was granted (see credit.go), folded from the
// machine's bucketIndex; its length is then a power of two.
//
// It is written here rather than taken from a library because its input is
// already a 64-bit xxhash, and because its bytes travel inside Raft results,
// which must decode with this package's bounded decoder.
type Filter struct {
	words []uint64
	k     uint8
}

const (
	filterBitsPerKey = 10 // about 1% false positives with 7 probes
	filterProbes     = 7
	// maxFilterWords bounds a decoded filter: 512 KiB, above both the
	// index's 128 KiB and the largest filter of a node built before it
	// (10 bits for each of 2^18 buckets).
	maxFilterWords = 1 << 16
)

// probe derives the i-th bit position of h, before the modulo, by double
// hashing (Kirsch and Mitzenmacher): h is already uniform, so its halves
// serve as the two hash functions. h2 is odd, so the probes of one key are
// distinct modulo any power of two.
func probe(h, i uint64) uint64 {
	h2 := h>>32 | h<<32 | 1
	return h + i*h2
}

func (f Filter) probe(h uint64, i uint64) (word int, bit uint64) {
	pos := probe(h, i) % (uint64(len(f.words)) * 64)
	return int(pos / 64), 1 << (pos % 64)
}

// MayContain reports whether h may have been added. The zero Filter
// contains nothing.
func (f Filter) MayContain(h uint64) bool {
	if len(f.words) == 0 {
		return false
	}
	for i := range uint64(f.k) {
		w, b := f.probe(h, i)
		if f.words[w]&b == 0 {
			return false
		}
	}
	return true
}

// Union is a filter that may contain what a or b may: b folded to a's
// length, or a to b's, and OR-ed. It needs both lengths powers of two (every
// filter the bucket index folds is) and the same probes; ok is false
// otherwise.
func Union(a, b Filter) (u Filter, ok bool) {
	if a.Empty() {
		return b, true
	}
	if b.Empty() {
		return a, true
	}
	pow2 := func(n int) bool { return n&(n-1) == 0 }
	if a.k != b.k || !pow2(len(a.words)) || !pow2(len(b.words)) {
		return Filter{}, false
	}
	if len(a.words) > len(b.words) {
		a, b = b, a
	}
	u = Filter{words: slices.Clone(a.words), k: a.k}
	for i := 0; i < len(b.words); i += len(u.words) {
		for j, w := range b.words[i : i+len(u.words)] {
			u.words[j] |= w
		}
	}
	return u, true
}

// Empty reports whether f was never built (it contains nothing).
func (f Filter) Empty() bool { return len(f.words) == 0 }

// appendFilter encodes f: probes, word count, words little-endian.
func appendFilter(dst []byte, f Filter) []byte {
	dst = append(dst, f.k)
	dst = binary.AppendUvarint(dst, uint64(len(f.words)))
	for _, w := range f.words {
		dst = binary.LittleEndian.AppendUint64(dst, w)
	}
	return dst
}

func (d *decoder) filter() Filter {
	k := d.byte()
	n := d.count(maxFilterWords, 8)
	if d.err != nil {
		return Filter{}
	}
	if k == 0 || k > 32 || n == 0 {
		d.fail()
		return Filter{}
	}
	f := Filter{words: make([]uint64, n), k: k}
	for i := range f.words {
		f.words[i] = d.u64()
	}
	return f
}
