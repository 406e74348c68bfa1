package raftlog

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// Log is one group's view of the WAL: a raft.LogStore.
type Log struct {
	w     *WAL
	group string
}

var (
	_ raft.LogStore          = (*Log)(nil)
	_ raft.MonotonicLogStore = (*Log)(nil)
)

// Log returns group's log store. Groups are told apart by name only: two
// stores for one name are the same log.
func (w *WAL) Log(group string) *Log { return &Log{w: w, group: group} }

// Group is the group's name.
func (l *Log) Group() string { return l.group }

// IsMonotonic tells raft to delete the whole log after installing a
// snapshot instead of leaving a gap below the snapshot's index.
func (l *Log) IsMonotonic() bool { return true }

// FirstIndex is the first live entry's index, 0 for an empty log.
func (l *Log) FirstIndex() (uint64, error) {
	l.w.mu.RLock()
	defer l.w.mu.RUnlock()
	if ix := l.w.mu.groups[l.group]; ix != nil && len(ix.locs) > 0 {
		return ix.first, nil
	}
	return 0, nil
}

// LastIndex is the last live entry's index, 0 for an empty log.
func (l *Log) LastIndex() (uint64, error) {
	l.w.mu.RLock()
	defer l.w.mu.RUnlock()
	if ix := l.w.mu.groups[l.group]; ix != nil {
		return ix.last(), nil
	}
	return 0, nil
}

// GetLog reads entry index back from its segment.
func (l *Log) GetLog(index uint64, out *raft.Log) error {
	l.w.mu.RLock()
	ix := l.w.mu.groups[l.group]
	if ix == nil || len(ix.locs) == 0 || index < ix.first || index > ix.last() {
		l.w.mu.RUnlock()
		return raft.ErrLogNotFound
	}
	at := ix.locs[index-ix.first]
	f := l.w.mu.segs[at.seg]
	// Read under the lock: a segment is closed and deleted only under the
	// write lock, so it cannot go while this read uses it.
	b := make([]byte, at.n)
	var err error
	if f == nil {
		err = fmt.Errorf("segment %s is gone", segmentName(at.seg))
	} else {
		_, err = f.ReadAt(b, int64(at.off))
	}
	l.w.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("raftlog: %s entry %d: %w", l.group, index, err)
	}
	if err := decodeLog(b, out); err != nil {
		return fmt.Errorf("raftlog: %s entry %d: %w", l.group, index, err)
	}
	if out.Index != index {
		return fmt.Errorf("%w: %s entry %d read back as %d", ErrCorrupt, l.group, index, out.Index)
	}
	return nil
}

// StoreLog appends one entry.
func (l *Log) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

// StoreLogs appends consecutive entries and returns once they are durable.
func (l *Log) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	for i := 1; i < len(logs); i++ {
		if logs[i].Index != logs[0].Index+uint64(i) {
			return fmt.Errorf("raftlog: %s: entries not consecutive: %d after %d", l.group, logs[i].Index, logs[i-1].Index)
		}
	}
	frame, spans := appendFrame(nil, l.group, logs)
	if len(frame)-frameHeader > maxFrame {
		return fmt.Errorf("raftlog: %s: %d bytes of entries in one append exceed %d", l.group, len(frame), maxFrame)
	}
	return l.w.submit(&pending{group: l.group, frame: frame, kind: kindAppend, first: logs[0].Index, spans: spans})
}

// DeleteRange deletes entries min..max inclusive.
func (l *Log) DeleteRange(min, max uint64) error {
	return l.w.submit(&pending{group: l.group, frame: deleteFrame(nil, l.group, min, max), kind: kindDelete, min: min, max: max})
}
