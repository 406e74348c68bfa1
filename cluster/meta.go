package cluster

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// metaFSM is the meta group's state machine: the cluster record. Later it
// will carry policies; today the record is written once, by the first meta
// leader, and is the authority every node's local copy must agree with.
type metaFSM struct {
	mu  sync.Mutex
	rec *record // guarded by mu
}

var _ raft.FSM = (*metaFSM)(nil)

// Apply stores a record unless one is already stored: bootstrap is once.
func (f *metaFSM) Apply(l *raft.Log) any {
	var r record
	if err := json.Unmarshal(l.Data, &r); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rec == nil {
		f.rec = &r
	}
	return nil
}

func (f *metaFSM) get() *record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec
}

func (f *metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(f.rec)
	return metaSnapshot(b), err
}

func (f *metaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var r *record
	if err := json.NewDecoder(rc).Decode(&r); err != nil {
		return err
	}
	f.mu.Lock()
	f.rec = r
	f.mu.Unlock()
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
