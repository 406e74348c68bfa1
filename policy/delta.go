package policy

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/quorate/quorate/policy/extract"
)

// Deltas between snapshots: a gateway that holds the set (client.Embedded)
// is sent what changed and patches its copy, so a change of one policy in
// 300k is one policy on the wire and one compiled, there as on a node.

// Delta is a change of the set as a Watch stream sends it to a gateway:
// from the version From, the policies put and the ids removed, and the
// blocks and extraction of the new version (each small), whole.
type Delta struct {
	From       uint64              `json:"from"`
	Put        []*Policy           `json:"put,omitempty"`
	Removed    []string            `json:"removed,omitempty"`
	Blocks     []Block             `json:"blocks,omitempty"`
	Extraction *extract.Extraction `json:"extraction,omitempty"`
}

// Blocks are the snapshot's blocks as compiled, sorted by id. Do not
// modify them.
func (s *Snapshot) Blocks() []Block { return s.blocks }

// Extraction is the extraction the snapshot reads requests with (nil:
// the defaults).
func (s *Snapshot) Extraction() *extract.Extraction {
	if s.extractor == nil {
		return nil
	}
	return s.extractor.Extraction()
}

// DeltaFrom is what changed from old to s: the policies s holds that old
// does not hold as they are (added, changed, or sent again), and the ids
// old holds that s does not. It compares only the byID shards s does not
// share with old (a change copies the shards it writes), so it costs what
// changed; after a full recompile, every shard. ok is false when there
// is no old or the delta would hold more than max entries: send s whole.
func (s *Snapshot) DeltaFrom(old *Snapshot, max int) (put []*Policy, removed []string, ok bool) {
	if s == nil || old == nil {
		return nil, nil, false
	}
	for i := range s.byID.shards {
		a, b := s.byID.shards[i], old.byID.shards[i]
		if reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
			continue
		}
		for id, slot := range a {
			if was, had := b[id]; !had || old.entries[was].p != s.entries[slot].p {
				put = append(put, s.entries[slot].p)
			}
		}
		for id := range b {
			if _, has := a[id]; !has {
				removed = append(removed, id)
			}
		}
		if len(put)+len(removed) > max {
			return nil, nil, false
		}
	}
	slices.SortFunc(put, cmpID)
	slices.Sort(removed)
	return put, removed, true
}

// Patched is s with the policies put (added, or replacing those of their
// ids, as they are: their updated_at kept) and the ids of remove taken out,
// at version, with blocks: what a gateway makes of its copy and a delta
// from DeltaFrom. It is compiled as ChangeFrom compiles, and fails as a
// change of the cluster's set would.
func (s *Snapshot) Patched(put []*Policy, remove []string, blocks []Block, version uint64) (*Snapshot, error) {
	upd := slices.SortedFunc(slices.Values(put), cmpID)
	for i := 1; i < len(upd); i++ {
		if upd[i].ID == upd[i-1].ID {
			return nil, invalid(fmt.Errorf("policy %s: put twice in one delta", upd[i].ID))
		}
	}
	for _, id := range remove {
		if _, found := slices.BinarySearchFunc(upd, id, cmpPolicyID); found {
			return nil, invalid(fmt.Errorf("policy %s: both put and removed in one delta", id))
		}
	}
	gone := s.held(remove)
	if len(upd)+len(gone) > len(s.ps)/2 || len(s.entries) > 2*len(s.ps)+len(s.blocks)+1024 {
		return CompileSet(mergeSorted(s.ps, upd, gone), blocks, version)
	}
	n, _, err := s.apply(upd, gone, blocks, version)
	return n, invalid(err)
}
