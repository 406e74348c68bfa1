package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/policy"
)

// metaFSM is the meta group's state machine: the cluster record, written
// once by the first meta leader, and the policy set with its emergency
// blocks, versioned. Every node is a meta voter, so every node applies each
// policy change and swaps its compiled snapshot (onPolicies) as it does.
type metaFSM struct {
	mu  sync.Mutex
	rec *record     // guarded by mu
	pol policyState // guarded by mu
	// onPolicies receives each new compiled policy snapshot, in log order,
	// with mu held (so two swaps never race), and the time the leader
	// stamped on the change (0 for a restore). Set before the group opens.
	onPolicies func(s *policy.Snapshot, stamped int64)
	// onRecord is told, without mu held, that the record changed; it must
	// not block. Set before the group opens.
	onRecord func()
}

var _ raft.FSM = (*metaFSM)(nil)

// policyState is the replicated policy set. Version counts changes; it is
// what every decision and `quorate status` report.
type policyState struct {
	Version  uint64          `json:"version"`
	Policies []policy.Policy `json:"policies,omitempty"`
	Blocks   []policy.Block  `json:"blocks,omitempty"`
}

// Bounds of the replicated policy set: the set lives in every node's memory
// and in one Raft entry per change.
const (
	maxPolicies = 500_000
	maxBlocks   = 10_000
	maxBlockFor = 7 * 24 * time.Hour
)

// metaCommand is one meta log entry. Op "" is the cluster record (the
// format before policies existed, kept so old logs replay). Now is the
// proposing leader's clock, stamped when it proposes: the state machine
// never reads one.
type metaCommand struct {
	Op       string          `json:"op,omitempty"`
	Now      int64           `json:"now,omitempty"`
	Policies []policy.Policy `json:"policies,omitempty"` // apply
	Prune    bool            `json:"prune,omitempty"`    // apply
	IDs      []string        `json:"ids,omitempty"`      // delete, unblock
	Block    *policy.Block   `json:"block,omitempty"`    // block
	Who      string          `json:"who,omitempty"`      // the principal, for the log
	Node     *nodeInfo       `json:"node,omitempty"`     // join
	ID       string          `json:"id,omitempty"`       // leave, replace, left
	Move     *move           `json:"move,omitempty"`     // move-start, move-done, move-abort
	Splits   []split         `json:"splits,omitempty"`   // split-start, split-done
}

const (
	opApply   = "apply"
	opDelete  = "delete"
	opBlock   = "block"
	opUnblock = "unblock"
)

// metaResult is what applying a policy command returns to its proposer.
type metaResult struct {
	Version uint64           `json:"version"`
	Changes policy.Changes   `json:"changes"`
	Diff    string           `json:"diff,omitempty"`
	Err     string           `json:"err,omitempty"`
	Code    metaErrCode      `json:"code,omitempty"`
	Block   *policy.Block    `json:"block,omitempty"`
	Record  *record          `json:"record,omitempty"` // after a record command
	changed *policy.Snapshot // set when the set changed; not sent
}

type metaErrCode int

const (
	metaOK metaErrCode = iota
	metaInvalid
	metaNotFound
)

// Apply stores the record unless one is already stored (bootstrap is
// once), or applies a policy command.
func (f *metaFSM) Apply(l *raft.Log) any {
	var c metaCommand
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return err
	}
	if c.Op == "" {
		return f.applyRecord(l.Data)
	}
	if isRecordOp(c.Op) {
		return f.applyMembership(&c)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := f.applyPolicyLocked(&c)
	if res.changed != nil && f.onPolicies != nil {
		f.onPolicies(res.changed, c.Now)
	}
	return res
}

func (f *metaFSM) applyRecord(data []byte) any {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	f.mu.Lock()
	stored := f.rec == nil
	if stored {
		f.rec = &r
	}
	f.mu.Unlock()
	if stored {
		f.recordChanged()
	}
	return nil
}

// applyMembership applies a record command (membership.go). A refused one
// changes nothing and says why.
func (f *metaFSM) applyMembership(c *metaCommand) any {
	f.mu.Lock()
	next, err := applyRecordOp(f.rec, c)
	if err != nil {
		f.mu.Unlock()
		return metaResult{Version: f.pol.Version, Err: err.Error(), Code: metaInvalid}
	}
	f.rec = next
	version := f.pol.Version
	f.mu.Unlock()
	f.recordChanged()
	return metaResult{Version: version, Record: next}
}

func (f *metaFSM) recordChanged() {
	if f.onRecord != nil {
		f.onRecord()
	}
}

// applyPolicyLocked computes the next state and keeps it only if it
// compiles: a refused change changes nothing, on every replica alike.
func (f *metaFSM) applyPolicyLocked(c *metaCommand) metaResult {
	now := time.Unix(0, c.Now).UTC()
	cur := f.pol
	blocks := liveBlocks(cur.Blocks, now)
	if c.Op == opApply {
		return f.applySetLocked(c, blocks, now)
	}
	next, ch, block, code, err := nextPolicies(cur.Policies, blocks, c, now)
	if err != nil {
		return metaResult{Version: cur.Version, Err: err.Error(), Code: code}
	}
	if block != nil {
		blocks = append(slices.Clone(blocks), *block)
	}
	if c.Op == opUnblock {
		blocks = slices.DeleteFunc(slices.Clone(blocks), func(b policy.Block) bool { return slices.Contains(c.IDs, b.ID) })
	}
	res := metaResult{Version: cur.Version, Changes: ch, Diff: policy.Diff(cur.Policies, next), Block: block}
	snap, err := policy.Compile(next, blocks, cur.Version+1)
	if err != nil {
		return metaResult{Version: cur.Version, Err: err.Error(), Code: metaInvalid}
	}
	return f.keepLocked(res, snap, next, blocks)
}

// applySetLocked applies a document: policy.Change validates and compiles
// the next set in one pass, the whole cost of a change at large sets.
func (f *metaFSM) applySetLocked(c *metaCommand, blocks []policy.Block, now time.Time) metaResult {
	cur := f.pol
	snap, next, ch, err := policy.Change(cur.Policies, c.Policies, c.Prune, now, blocks, cur.Version+1)
	if err == nil && len(next) > maxPolicies {
		err = fmt.Errorf("the set would hold %d policies, more than the cluster's maximum of %d", len(next), maxPolicies)
	}
	if err != nil {
		return metaResult{Version: cur.Version, Err: err.Error(), Code: metaInvalid}
	}
	res := metaResult{Version: cur.Version, Changes: ch}
	if len(ch.Added)+len(ch.Changed)+len(ch.Removed) == 0 {
		return res // nothing to do: the version stays, and no node swaps
	}
	res.Diff = policy.Diff(cur.Policies, next)
	return f.keepLocked(res, snap, next, blocks)
}

func (f *metaFSM) keepLocked(res metaResult, snap *policy.Snapshot, next []policy.Policy, blocks []policy.Block) metaResult {
	f.pol = policyState{Version: f.pol.Version + 1, Policies: next, Blocks: blocks}
	res.Version, res.changed = f.pol.Version, snap
	return res
}

func nextPolicies(cur []policy.Policy, blocks []policy.Block, c *metaCommand, now time.Time) ([]policy.Policy, policy.Changes, *policy.Block, metaErrCode, error) {
	switch c.Op {
	case opApply:
		next, ch, err := policy.ApplySet(cur, c.Policies, c.Prune, now)
		if err == nil && len(next) > maxPolicies {
			err = fmt.Errorf("the set would hold %d policies, more than the cluster's maximum of %d", len(next), maxPolicies)
		}
		if err != nil {
			return nil, ch, nil, metaInvalid, err
		}
		return next, ch, nil, metaOK, nil
	case opDelete:
		next, ch, err := policy.Delete(cur, c.IDs)
		if err != nil {
			return nil, ch, nil, metaNotFound, err
		}
		return next, ch, nil, metaOK, nil
	case opBlock:
		if c.Block == nil {
			return nil, policy.Changes{}, nil, metaInvalid, errors.New("block: missing")
		}
		if len(blocks) >= maxBlocks {
			return nil, policy.Changes{}, nil, metaInvalid, fmt.Errorf("%d emergency blocks are active, the cluster's maximum", maxBlocks)
		}
		b := *c.Block
		if b.ExpiresAt.After(now.Add(maxBlockFor + time.Minute)) {
			// The proposer bounds the duration by its own clock; the log's
			// time bounds it again, a minute's skew allowed.
			return nil, policy.Changes{}, nil, metaInvalid, fmt.Errorf("block: expires %s, more than %s after the meta leader's time", b.ExpiresAt.Format(time.RFC3339), maxBlockFor)
		}
		b.ID = fmt.Sprintf("block-%d", c.Now)
		return cur, policy.Changes{}, &b, metaOK, nil
	case opUnblock:
		for _, id := range c.IDs {
			if !slices.ContainsFunc(blocks, func(b policy.Block) bool { return b.ID == id }) {
				return nil, policy.Changes{}, nil, metaNotFound, fmt.Errorf("no active emergency block %q", id)
			}
		}
		return cur, policy.Changes{}, nil, metaOK, nil
	}
	return nil, policy.Changes{}, nil, metaInvalid, fmt.Errorf("unknown meta command %q", c.Op)
}

// liveBlocks drops the blocks that expired by now: the log's time, so
// every replica drops the same ones.
func liveBlocks(bs []policy.Block, now time.Time) []policy.Block {
	out := bs[:0:0]
	for _, b := range bs {
		if now.Before(b.ExpiresAt) {
			out = append(out, b)
		}
	}
	return out
}

func (f *metaFSM) get() *record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec
}

func (f *metaFSM) policies() policyState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pol
}

// metaState is the snapshot format. A snapshot from before policies is the
// bare record; Restore reads both.
type metaState struct {
	Record *record      `json:"record"`
	Policy *policyState `json:"policy"`
}

func (f *metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pol := f.pol
	b, err := json.Marshal(metaState{Record: f.rec, Policy: &pol})
	return metaSnapshot(b), err
}

func (f *metaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	var st metaState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if st.Policy == nil { // the old format: the record alone
		st.Record = nil
		if err := json.Unmarshal(b, &st.Record); err != nil {
			return err
		}
		st.Policy = &policyState{}
	}
	snap, err := policy.Compile(st.Policy.Policies, st.Policy.Blocks, st.Policy.Version)
	if err != nil {
		return fmt.Errorf("cluster: meta snapshot: policy set: %w", err)
	}
	if st.Record != nil {
		st.Record.normalize()
	}
	f.mu.Lock()
	f.rec, f.pol = st.Record, *st.Policy
	if f.onPolicies != nil {
		f.onPolicies(snap, 0)
	}
	f.mu.Unlock()
	f.recordChanged()
	return nil
}

type metaSnapshot []byte

func (s metaSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s metaSnapshot) Release() {}
