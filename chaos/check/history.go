package check

import (
	"fmt"
	"sync"
	"time"
)

// Outcome is what a client learned from a check.
type Outcome uint8

// The outcomes.
const (
	// Unknown: the check timed out or failed; it may or may not have happened.
	Unknown Outcome = iota
	Allowed
	Denied
)

func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allow"
	case Denied:
		return "deny"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Operation is one client's strict check on the key under test.
type Operation struct {
	Client  int   // zero-indexed, for visualization
	Call    int64 // wall clock at invocation, Unix ns
	Return  int64 // wall clock at completion, Unix ns; ignored for Unknown
	Cost    int64
	Outcome Outcome
	// DecidedAt is the state machine's time of the decision, Unix ns, or 0
	// when not known (Unknown ops, or a server that did not report it).
	DecidedAt int64
	// Index is the Raft log index of the command that decided the op, or 0.
	// Ops batched in one command share an index.
	Index uint64
	// Shard is the shard whose log Index is in. A split moves a key to a
	// new shard, always of a higher ID, whose log starts again: the
	// decisions of one key are ordered by (Shard, Index).
	Shard int `json:",omitempty"`
}

// decided is the op's decision time: DecidedAt, or Return when absent.
func (op *Operation) decided() int64 {
	if op.DecidedAt != 0 {
		return op.DecidedAt
	}
	return op.Return
}

func (op Operation) String() string {
	return fmt.Sprintf("c%d [%d,%d] take %d -> %s @%d #%d/%d", op.Client, op.Call, op.Return, op.Cost, op.Outcome, op.DecidedAt, op.Shard, op.Index)
}

// Recorder collects a history from concurrent clients. Its fields are
// guarded by mu.
type Recorder struct {
	mu  sync.Mutex
	ops []Operation
}

// Invoke records that client calls a check of cost at time at and returns
// the id to complete it with.
func (r *Recorder) Invoke(client int, cost int64, at time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, Operation{Client: client, Call: at.UnixNano(), Cost: cost})
	return len(r.ops) - 1
}

// Complete records the completion of op id at time at, decided at
// machine time decidedAt by entry index of shard's log. For Unknown,
// decidedAt, index and shard are ignored.
func (r *Recorder) Complete(id int, at time.Time, out Outcome, decidedAt int64, index uint64, shard int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := &r.ops[id]
	op.Return, op.Outcome = at.UnixNano(), out
	if out != Unknown {
		op.DecidedAt, op.Index, op.Shard = decidedAt, index, shard
	}
}

// History returns a copy of the operations recorded so far. Operations not
// completed yet are Unknown.
func (r *Recorder) History() []Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Operation(nil), r.ops...)
}
