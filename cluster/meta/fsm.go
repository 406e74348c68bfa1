package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
	"github.com/quorate/quorate/policy/tenants"
)

// FSM is the meta group's state machine: the cluster record, written once
// by the first meta leader and changed by membership commands, and the
// policy set with its emergency blocks, versioned. Every node is a meta
// voter, so every node applies each policy change and swaps its compiled
// snapshot (OnPolicies) as it does.
//
// Raft calls Apply, Snapshot and Restore from one goroutine; the node reads
// the state (Record, Policies, WaitVersion) from others, so mu guards it.
// The zero FSM is empty and ready; set the hooks before its group opens.
type FSM struct {
	// OnPolicies receives each new compiled policy snapshot, in log order,
	// with mu held (so two swaps never race), and the time the leader
	// stamped on the change (0 for a restore).
	OnPolicies func(s *policy.Snapshot, stamped int64)
	// OnRecord is told, without mu held, that the record changed; it must
	// not block.
	OnRecord func()
	// OnTenants receives each new tenant assignment, in log order, and the
	// time the leader stamped on the change (0 for a restore).
	OnTenants func(t *tenants.Table, stamped int64)
	ten       tenantStore // tenants.go

	mu struct {
		sync.Mutex
		rec *Record
		pol PolicyState
		// hist is pol's history (history.go).
		hist History
		// ext is pol.Extraction compiled (nil: the defaults).
		ext *extract.Extractor
		// snap is pol compiled: the next apply starts from it (nil: from
		// nothing).
		snap *policy.Snapshot
		// changed is closed, and replaced by the next waiter, when the
		// policy set changes (WaitVersion); nil while no one waits.
		changed chan struct{}
	}
}

// Command is one meta log entry. Op "" is the cluster record (the format
// before policies existed, kept so old logs replay). Now is the proposing
// leader's clock, stamped when it proposes: the state machine never reads
// one.
type Command struct {
	Op       string          `json:"op,omitempty"`
	Now      int64           `json:"now,omitempty"`
	Policies []policy.Policy `json:"policies,omitempty"` // apply
	Prune    bool            `json:"prune,omitempty"`    // apply
	Source   string          `json:"source,omitempty"`   // apply: the document's name, for the history
	To       uint64          `json:"to,omitempty"`       // rollback: the version it restores
	Base     uint64          `json:"base,omitempty"`     // rollback: the version it was computed against
	IDs      []string        `json:"ids,omitempty"`      // delete, unblock
	Block    *policy.Block   `json:"block,omitempty"`    // block
	// Extraction is an apply's extraction section (nil: none; see NextExtraction).
	Extraction *extract.Extraction `json:"extraction,omitempty"`
	Who        string              `json:"who,omitempty"`    // the principal, for the log
	Node       *NodeInfo           `json:"node,omitempty"`   // join
	ID         string              `json:"id,omitempty"`     // leave, replace, left
	Move       *Move               `json:"move,omitempty"`   // move-start, move-done, move-abort
	Splits     []Split             `json:"splits,omitempty"` // split-start, split-done
	// Tenants are a tenant-set's assignments.
	Tenants tenants.List `json:"tenants,omitempty"`
}

// Result is what applying a command returns to its proposer (and what the
// meta leader sends back to a node that proposed through it).
type Result struct {
	Version uint64           `json:"version"`
	Changes policy.Changes   `json:"changes"`
	Diff    string           `json:"diff,omitempty"`
	Err     string           `json:"err,omitempty"`
	Code    Code             `json:"code,omitempty"`
	Block   *policy.Block    `json:"block,omitempty"`
	Record  *Record          `json:"record,omitempty"` // after a record command
	changed *policy.Snapshot // set when the set changed; not sent
	// Tenants is what a tenant command did.
	Tenants *TenantResult `json:"tenants,omitempty"`
}

// Apply applies one committed log entry and returns what its proposer is
// told: an error if data is not a command, nil for the record (stored
// unless one is already: bootstrap is once), a Result otherwise. It must
// be deterministic: every replica applies the same entries alike.
func (f *FSM) Apply(data []byte) any {
	var c Command
	if err := json.Unmarshal(data, &c); err != nil {
		return err
	}
	if c.Op == "" {
		return f.applyRecord(data)
	}
	if isRecordOp(c.Op) {
		return f.applyMembership(&c)
	}
	if isTenantOp(c.Op) {
		return f.applyTenants(&c)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := f.applyPolicyLocked(&c)
	if res.changed != nil && f.OnPolicies != nil {
		f.OnPolicies(res.changed, c.Now)
	}
	return res
}

func (f *FSM) applyRecord(data []byte) any {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	f.mu.Lock()
	stored := f.mu.rec == nil
	if stored {
		f.mu.rec = &r
	}
	f.mu.Unlock()
	if stored {
		f.recordChanged()
	}
	return nil
}

// applyMembership applies a record command (ApplyRecordOp). A refused one
// changes nothing and says why.
func (f *FSM) applyMembership(c *Command) any {
	f.mu.Lock()
	next, err := ApplyRecordOp(f.mu.rec, c)
	if err != nil {
		f.mu.Unlock()
		return Result{Version: f.mu.pol.Version, Err: err.Error(), Code: CodeInvalid}
	}
	f.mu.rec = next
	version := f.mu.pol.Version
	f.mu.Unlock()
	f.recordChanged()
	return Result{Version: version, Record: next}
}

func (f *FSM) recordChanged() {
	if f.OnRecord != nil {
		f.OnRecord()
	}
}

// applyPolicyLocked computes the next state and keeps it only if it
// compiles: a refused change changes nothing, on every replica alike.
func (f *FSM) applyPolicyLocked(c *Command) Result {
	now := time.Unix(0, c.Now).UTC()
	cur := f.mu.pol
	blocks := LiveBlocks(cur.Blocks, now)
	switch {
	case c.Op == OpRollback && c.Base != cur.Version:
		return Result{Version: cur.Version, Code: CodeStale,
			Err: fmt.Sprintf("rollback to %d: the set is at version %d, not %d as when the rollback was computed", c.To, cur.Version, c.Base)}
	case c.Op == OpApply, c.Op == OpRollback:
		return f.applySetLocked(c, blocks, now)
	case c.Op == OpDelete:
		return f.deleteLocked(c, blocks, now)
	}
	_, ch, block, code, err := NextPolicies(cur.Policies, blocks, c, now)
	if err != nil {
		return Result{Version: cur.Version, Err: err.Error(), Code: code}
	}
	if block != nil {
		blocks = append(slices.Clone(blocks), *block)
	}
	if c.Op == OpUnblock {
		blocks = slices.DeleteFunc(slices.Clone(blocks), func(b policy.Block) bool { return slices.Contains(c.IDs, b.ID) })
	}
	// A block or unblock: the policies stay; the blocks are compiled alone.
	res := Result{Version: cur.Version, Changes: ch, Block: block}
	snap, next, _, err := policy.ChangeFrom(f.mu.snap, nil, nil, false, now, blocks, cur.Version+1)
	if err != nil {
		return Result{Version: cur.Version, Err: err.Error(), Code: CodeInvalid}
	}
	return f.keepLocked(c, res, snap, next, blocks, cur.Extraction, f.mu.ext)
}

// deleteLocked removes policies, compiling only what extends them.
func (f *FSM) deleteLocked(c *Command, blocks []policy.Block, now time.Time) Result {
	cur := f.mu.pol
	snap, next, ch, err := policy.DeleteFrom(f.mu.snap, c.IDs, now, blocks, cur.Version+1)
	if err != nil {
		code := CodeInvalid
		if errors.Is(err, policy.ErrNotFound) {
			code = CodeNotFound
		}
		return Result{Version: cur.Version, Err: err.Error(), Code: code}
	}
	res := Result{Version: cur.Version, Changes: ch, Diff: policy.DiffOf(f.mu.snap, snap, ch)}
	return f.keepLocked(c, res, snap, next, blocks, cur.Extraction, f.mu.ext)
}

// applySetLocked applies a document, or a rollback (a document that also
// removes IDs), compiling only what changed (policy.ChangeFrom).
func (f *FSM) applySetLocked(c *Command, blocks []policy.Block, now time.Time) Result {
	cur := f.mu.pol
	var remove []string
	if c.Op == OpRollback {
		remove = c.IDs
	}
	ext, x := NextExtraction(cur.Extraction, c), f.mu.ext
	extChanged := !extract.Same(cur.Extraction, ext)
	var err error
	if extChanged {
		x, err = extract.Compile(ext)
	}
	if err != nil {
		return Result{Version: cur.Version, Err: err.Error(), Code: CodeInvalid}
	}
	snap, next, ch, err := policy.ChangeFrom(f.mu.snap, c.Policies, remove, c.Prune, now, blocks, cur.Version+1)
	if err == nil && len(next) > MaxPolicies {
		err = fmt.Errorf("the set would hold %d policies, more than the cluster's maximum of %d", len(next), MaxPolicies)
	}
	if err != nil {
		return Result{Version: cur.Version, Err: err.Error(), Code: CodeInvalid}
	}
	ch.Extraction = extChanged
	res := Result{Version: cur.Version, Changes: ch}
	if len(ch.Added)+len(ch.Changed)+len(ch.Removed) == 0 && !extChanged {
		return res // nothing to do: the version stays, and no node swaps
	}
	res.Diff = policy.DiffOf(f.mu.snap, snap, ch) + policy.ExtractionDiff(cur.Extraction, ext)
	return f.keepLocked(c, res, snap, next, blocks, ext, x)
}

// keepLocked makes the next state current and records it in the history;
// snap gets the extractor x of the extraction ext, so every change's
// snapshot extracts as the set says.
func (f *FSM) keepLocked(c *Command, res Result, snap *policy.Snapshot, next []*policy.Policy, blocks []policy.Block, ext *extract.Extraction, x *extract.Extractor) Result {
	prev := f.mu.pol
	f.mu.hist = f.mu.hist.push(entryOf(c, prev, res.Changes, res.Block), prev.Version)
	f.mu.pol = PolicyState{Version: prev.Version + 1, Policies: next, Blocks: blocks, Extraction: ext}
	f.mu.ext, f.mu.snap = x, snap
	f.policiesChangedLocked()
	res.Version, res.changed = f.mu.pol.Version, snap.WithExtractor(x)
	return res
}

// policiesChangedLocked wakes the WaitVersion calls waiting for a change.
func (f *FSM) policiesChangedLocked() {
	if f.mu.changed != nil {
		close(f.mu.changed)
		f.mu.changed = nil
	}
}

// Record returns the cluster record, nil until the first meta leader
// stored it. It is never modified: a change replaces it.
func (f *FSM) Record() *Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.rec
}

// Policies returns the policy set.
func (f *FSM) Policies() PolicyState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.pol
}

// History returns the policy set and its history, of the same version.
func (f *FSM) History() (PolicyState, History) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.pol, f.mu.hist
}

// WaitVersion waits until this replica has applied policy version v, or
// restored a snapshot at or past it, and reports whether it has; false
// means ctx ended first. It waits on a channel the next policy change
// closes, not by polling.
func (f *FSM) WaitVersion(ctx context.Context, v uint64) bool {
	for {
		f.mu.Lock()
		if f.mu.pol.Version >= v {
			f.mu.Unlock()
			return true
		}
		if f.mu.changed == nil {
			f.mu.changed = make(chan struct{})
		}
		changed := f.mu.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// snapshotState is the snapshot format. A snapshot from before policies is
// the bare record, one from before the history has none; Restore reads
// them all.
type snapshotState struct {
	Record  *Record        `json:"record"`
	Policy  *PolicyState   `json:"policy"`
	History *History       `json:"history,omitempty"`
	Tenants *tenants.Table `json:"tenants,omitempty"`
}

// Snapshot encodes the state at once (raft may apply entries while it
// writes the bytes out).
func (f *FSM) Snapshot() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pol := f.mu.pol
	st := snapshotState{Record: f.mu.rec, Policy: &pol, Tenants: f.tenantSnapshot()}
	if len(f.mu.hist.Entries) > 0 || f.mu.hist.Dropped > 0 {
		st.History = &f.mu.hist
	}
	return json.Marshal(st)
}

// Restore replaces the state with a snapshot's (Snapshot's bytes, or a
// bare record: the format before policies). A snapshot whose policy set
// does not compile is refused and changes nothing.
func (f *FSM) Restore(data []byte) error {
	var st snapshotState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	if st.Policy == nil { // the old format: the record alone
		st.Record = nil
		if err := json.Unmarshal(data, &st.Record); err != nil {
			return err
		}
		st.Policy = &PolicyState{}
	}
	snap, err := policy.CompileSet(st.Policy.Policies, st.Policy.Blocks, st.Policy.Version)
	if err != nil {
		return fmt.Errorf("cluster: meta snapshot: policy set: %w", err)
	}
	st.Policy.Policies = snap.Policies() // sorted by id, as every change keeps it
	st.Policy.Extraction = extract.Normal(st.Policy.Extraction)
	x, err := extract.Compile(st.Policy.Extraction)
	if err != nil {
		return fmt.Errorf("cluster: meta snapshot: %w", err)
	}
	if st.Policy.Extraction == nil {
		x = nil // the defaults, as a state that never had one holds them
	}
	snap = snap.WithExtractor(x)
	if st.Record != nil {
		st.Record.Normalize()
	}
	hist := restoredHistory(st.History, st.Policy.Version)
	f.restoreTenants(st.Tenants)
	f.mu.Lock()
	f.mu.rec, f.mu.pol, f.mu.ext, f.mu.snap, f.mu.hist = st.Record, *st.Policy, x, snap, hist
	f.policiesChangedLocked()
	if f.OnPolicies != nil {
		f.OnPolicies(snap, 0)
	}
	f.mu.Unlock()
	f.recordChanged()
	return nil
}

// restoredHistory is a snapshot's history (nil: one from before the
// history) if it fits the set at version v; else none, and the history
// starts again with the next change.
func restoredHistory(h *History, v uint64) History {
	if h == nil || !h.valid(v) {
		return History{}
	}
	out := *h
	out.Entries = slices.Clone(h.Entries)
	out.trim()
	return out
}
