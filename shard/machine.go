package shard

import (
	"bytes"
	"io"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
)

// machineFSM adapts an fsm.Machine to raft. Raft calls Apply, ApplyBatch,
// Snapshot and Restore from one goroutine, so the machine needs no lock.
type machineFSM struct {
	m *fsm.Machine
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
// proposer; it changes nothing.
func (a *machineFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand {
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
	if err := a.m.Snapshot(&b); err != nil {
		return nil, err
	}
	return snapshot(b.Bytes()), nil
}

func (a *machineFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return a.m.Restore(rc)
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
