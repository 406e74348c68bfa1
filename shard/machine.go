package shard

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
)

// machineFSM adapts an fsm.Machine to raft. Raft calls Apply, ApplyBatch,
// Snapshot and Restore from one goroutine; the cluster also reads the
// machine's split state and exports chunks of a split from others, so mu
// guards the machine. It is taken once per batch of entries, not per op.
type machineFSM struct {
	mu sync.Mutex
	m  *fsm.Machine // guarded by mu
}

var _ raft.BatchingFSM = (*machineFSM)(nil)

// applied is what one log entry's application returns to the proposer.
type applied struct {
	results []fsm.Result
	now     int64 // the machine's time when it applied the entry
	index   uint64
	err     error
}

func (a *machineFSM) Apply(l *raft.Log) any {
	return a.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order. An entry that does not
// decode is skipped identically on every replica and reported to its
// proposer; it changes nothing. A control entry (fsm.IsControl) is applied
// with ApplyControl, and its error reported the same way.
func (a *machineFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if fsm.IsControl(l.Data) {
			c, err := fsm.DecodeControl(l.Data)
			if err == nil {
				err = a.m.ApplyControl(c)
			}
			out[i] = &applied{now: a.m.Now(), index: l.Index, err: err}
			continue
		}
		cmd, err := fsm.DecodeCommand(l.Data)
		if err != nil {
			out[i] = &applied{index: l.Index, err: err}
			continue
		}
		rs := a.m.Apply(cmd, make([]fsm.Result, 0, len(cmd.Ops)))
		out[i] = &applied{results: rs, now: a.m.Now(), index: l.Index}
	}
	return out
}

// Snapshot encodes the machine at once: raft may apply new entries while
// Persist runs, so the state must be captured now. Encoding is fast
// (tens of ms for a million keys) next to writing it out.
func (a *machineFSM) Snapshot() (raft.FSMSnapshot, error) {
	var b bytes.Buffer
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.m.Snapshot(&b); err != nil {
		return nil, err
	}
	return snapshot(b.Bytes()), nil
}

// Restore reads the snapshot before it takes the lock: reading may wait
// on the network or disk.
func (a *machineFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("shard: reading snapshot: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m.Restore(bytes.NewReader(b))
}

// split returns the machine's split state.
func (a *machineFSM) split() fsm.SplitInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m.Split()
}

// exportChunk returns chunk seq of the machine's frozen copy. Only the
// pointer is read under the lock: the frozen copy never changes, so the
// chunk is encoded without holding up applies.
func (a *machineFSM) exportChunk(seq uint64) ([]byte, bool, error) {
	a.mu.Lock()
	f := a.m.Frozen()
	a.mu.Unlock()
	if f == nil {
		return nil, false, fmt.Errorf("shard: %w: nothing is frozen", fsm.ErrSplit)
	}
	return f.Chunk(seq)
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}
