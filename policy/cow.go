package policy

import (
	"hash/maphash"
	"maps"
	"net/netip"
)

// cowShards splits each large index map so that a change copies only the
// shards it writes (1/256 of a 300k-entry map), and the snapshot it forked
// from stays immutable for the readers that still hold it.
const cowShards = 256

var cowSeed = maphash.MakeSeed() // in-memory only: never persisted or sent

func hashString(s string) uint64   { return maphash.String(cowSeed, s) }
func hashAddr(a netip.Addr) uint64 { return maphash.Comparable(cowSeed, a) }
func hashPivot(k pivotKey) uint64 {
	return maphash.String(cowSeed, k.desc) ^ maphash.String(cowSeed, k.v)*31
}
func hashEntry(e *entry) uint64                    { return maphash.Comparable(cowSeed, e) }
func newStringMap[V any](n int) *cowMap[string, V] { return newCOWMap[string, V](hashString, n) }

// cowMap is a map whose fork shares every shard until one is written.
type cowMap[K comparable, V any] struct {
	hash   func(K) uint64
	shards [cowShards]map[K]V
	owned  [cowShards / 64]uint64 // shards this map may write in place
	n      int
}

// newCOWMap sizes every shard for n entries in all: growing shards one by
// one costs more than filling them.
func newCOWMap[K comparable, V any](hash func(K) uint64, n int) *cowMap[K, V] {
	m := &cowMap[K, V]{hash: hash}
	for i := range m.shards {
		m.shards[i] = make(map[K]V, n/cowShards)
	}
	for i := range m.owned {
		m.owned[i] = ^uint64(0)
	}
	return m
}

func (m *cowMap[K, V]) get(k K) (V, bool) {
	v, ok := m.shards[m.hash(k)%cowShards][k]
	return v, ok
}

func (m *cowMap[K, V]) writable(k K) map[K]V {
	i := m.hash(k) % cowShards
	if m.owned[i/64]&(1<<(i%64)) == 0 {
		m.shards[i] = maps.Clone(m.shards[i])
		if m.shards[i] == nil {
			m.shards[i] = map[K]V{}
		}
		m.owned[i/64] |= 1 << (i % 64)
	}
	return m.shards[i]
}

func (m *cowMap[K, V]) set(k K, v V) {
	s := m.writable(k)
	if _, ok := s[k]; !ok {
		m.n++
	}
	s[k] = v
}

func (m *cowMap[K, V]) del(k K) {
	if _, ok := m.get(k); !ok {
		return
	}
	delete(m.writable(k), k)
	m.n--
}

// each calls f with every entry, in no particular order.
func (m *cowMap[K, V]) each(f func(K, V)) {
	for i := range m.shards {
		for k, v := range m.shards[i] {
			f(k, v)
		}
	}
}

// fork returns a copy that shares every shard with m until it writes one.
// m must not be written afterwards.
func (m *cowMap[K, V]) fork() *cowMap[K, V] {
	c := *m
	c.owned = [cowShards / 64]uint64{}
	return &c
}
