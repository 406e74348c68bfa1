package shard

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// StateMachine is a replicated state machine that knows nothing of Raft:
// a group hands it each committed command's bytes, and takes and restores
// its snapshots as bytes. Apply must be deterministic. Raft calls the three
// methods from one goroutine, never at once.
type StateMachine interface {
	// Apply applies one committed command; what it returns is the
	// proposer's future's Response.
	Apply(data []byte) any
	// Snapshot encodes the state as it is now: the group writes the bytes
	// out while later commands apply.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot's.
	Restore(data []byte) error
}

// OpenMachine opens a group (OpenGroup) whose state machine is sm.
func OpenMachine(cfg GroupConfig, sm StateMachine) (*Group, error) {
	return OpenGroup(cfg, stateMachineFSM{sm})
}

// stateMachineFSM adapts a StateMachine to raft.FSM.
type stateMachineFSM struct{ sm StateMachine }

var _ raft.FSM = stateMachineFSM{}

// Apply is only called with command entries (raft.FSM's contract).
func (a stateMachineFSM) Apply(l *raft.Log) any { return a.sm.Apply(l.Data) }

func (a stateMachineFSM) Snapshot() (raft.FSMSnapshot, error) {
	b, err := a.sm.Snapshot()
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

func (a stateMachineFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("shard: reading snapshot: %w", err)
	}
	return a.sm.Restore(b)
}
