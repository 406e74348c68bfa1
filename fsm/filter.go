package fsm

import "encoding/binary"

// Filter is a Bloom filter over bucket key hashes: MayContain never says
// false for a hash that was added. A credit carries one of the buckets
// that existed when it was granted (see credit.go).
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
	maxFilterWords   = 1 << 24 // 128 MiB: far above any shard's key count
)

// newFilter sizes a filter for n hashes.
func newFilter(n int) Filter {
	words := min(maxFilterWords, max(1, (n*filterBitsPerKey+63)/64))
	return Filter{words: make([]uint64, words), k: filterProbes}
}

// probe derives the filter's bit positions from h by double hashing
// (Kirsch and Mitzenmacher): h is already uniform, so its halves serve as
// the two hash functions.
func (f Filter) probe(h uint64, i uint64) (word int, bit uint64) {
	h2 := h>>32 | h<<32 | 1
	pos := (h + i*h2) % (uint64(len(f.words)) * 64)
	return int(pos / 64), 1 << (pos % 64)
}

func (f Filter) add(h uint64) {
	for i := range uint64(f.k) {
		w, b := f.probe(h, i)
		f.words[w] |= b
	}
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
