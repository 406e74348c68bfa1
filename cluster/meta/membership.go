package meta

import (
	"fmt"
	"slices"
)

// Membership as meta commands. Every change to the record (a node joins,
// leaves, is replaced, a replica move starts or ends) is one command in the
// meta group's log, proposed by its leader or through it, and applied by a
// pure function of the record and the command below: two changes at once
// are serialized by the log, and every replica refuses a bad one alike.

// A node's state in the record.
const (
	StateActive  = ""        // holds replicas; the planner places shards on it
	StateLeaving = "leaving" // its replicas are being moved away
	StateLeft    = "left"    // it left on purpose; it holds nothing
	StateRemoved = "removed" // replaced after it was dead past the grace
)

// Bounds of the record: every replica must decide alike, so they are
// constants, not a node's flags.
const (
	MaxDeparted = 64 // left and removed nodes remembered, newest kept
	MaxMoves    = 64 // moves in progress, whatever --max-moves says
)

// Move is a replica move in progress (ring.Move, as recorded): Add joins
// Shard's group, then Remove (if any) leaves it.
type Move struct {
	Shard  int    `json:"shard"`
	Add    string `json:"add,omitempty"`
	Remove string `json:"remove,omitempty"`
}

// Meta ops that change the record.
const (
	OpJoin      = "join"       // Node
	OpLeave     = "leave"      // ID
	OpReplace   = "replace"    // ID
	OpLeft      = "left"       // ID: a leaving node holds nothing any more
	OpMoveStart = "move-start" // Move
	OpMoveDone  = "move-done"  // Move
	OpMoveAbort = "move-abort" // Move
)

func isRecordOp(op string) bool {
	switch op {
	case OpJoin, OpLeave, OpReplace, OpLeft, OpMoveStart, OpMoveDone, OpMoveAbort, OpSplitStart, OpSplitDone:
		return true
	}
	return false
}

// State returns the node's state, and false if the record does not know it.
func (r *Record) State(id string) (string, bool) {
	n, ok := r.Node(id)
	return n.State, ok
}

// Active returns the active nodes' IDs, in record order.
func (r *Record) Active() []string {
	var ids []string
	for _, n := range r.Nodes {
		if n.State == StateActive {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// Member reports whether the node takes part in the cluster: active or
// leaving.
func (r *Record) Member(id string) bool {
	st, ok := r.State(id)
	return ok && (st == StateActive || st == StateLeaving)
}

// MoveOf returns the move in progress on shard s.
func (r *Record) MoveOf(s int) (Move, bool) {
	for _, m := range r.Moves {
		if m.Shard == s {
			return m, true
		}
	}
	return Move{}, false
}

// Wants reports whether node id should hold a replica of shard s: it is
// placed there, or a move in progress adds it.
func (r *Record) Wants(id string, s int) bool {
	if slices.Contains(r.Placement[s], id) {
		return true
	}
	m, ok := r.MoveOf(s)
	return ok && m.Add == id
}

// Holds reports whether the record still has a use for node id: a replica
// placed on it or a move naming it.
func (r *Record) Holds(id string) bool {
	for _, reps := range r.Placement {
		if slices.Contains(reps, id) {
			return true
		}
	}
	return slices.ContainsFunc(r.Moves, func(m Move) bool { return m.Add == id || m.Remove == id })
}

// ApplyRecordOp returns the record after c, or an error (and no change)
// if c does not apply to r. r is not modified.
func ApplyRecordOp(r *Record, c *Command) (*Record, error) {
	if r == nil {
		return nil, fmt.Errorf("%s: the cluster has no record yet", c.Op)
	}
	next := r.Clone()
	var err error
	switch c.Op {
	case OpJoin:
		err = next.join(c.Node)
	case OpLeave:
		err = next.leave(c.ID)
	case OpReplace:
		err = next.setState(c.ID, StateRemoved, StateActive, StateLeaving)
	case OpLeft:
		if err = next.setState(c.ID, StateLeft, StateLeaving); err == nil && next.Holds(c.ID) {
			err = fmt.Errorf("left: node %q still holds replicas", c.ID)
		}
	case OpMoveStart:
		err = next.startMove(c.Move)
	case OpMoveDone:
		err = next.finishMove(c.Move)
	case OpMoveAbort:
		err = next.dropMove(c.Move)
	case OpSplitStart:
		err = next.startSplits(c.Splits)
	case OpSplitDone:
		if len(c.Splits) != 1 {
			err = fmt.Errorf("split-done: want one split, got %d", len(c.Splits))
		} else {
			err = next.finishSplit(c.Splits[0])
		}
	default:
		err = fmt.Errorf("unknown record command %q", c.Op)
	}
	if err != nil {
		return nil, err
	}
	next.Epoch++
	next.forgetDeparted()
	return next, nil
}

func (r *Record) join(n *NodeInfo) error {
	if n == nil || n.ID == "" || n.Peer == "" || n.RPC == "" {
		return fmt.Errorf("join: the node needs an id, a peer and an rpc address")
	}
	for i, cur := range r.Nodes {
		if cur.ID != n.ID {
			continue
		}
		if cur.State == StateActive && n.Incarnation != "" && cur.Incarnation == n.Incarnation {
			return nil // this very data dir joined already; its answer was lost
		}
		if cur.State == StateActive || cur.State == StateLeaving {
			return fmt.Errorf("join: node %q is already a member of the cluster; a member that lost its data "+
				"dir must be replaced first: stop it, then run quorate remove --node %s (or wait for the dead-node grace, "+
				"if the other nodes can hold every shard's replicas)", n.ID, n.ID)
		}
		if r.Holds(n.ID) {
			// Its old replicas are still in their groups' configurations:
			// joining now would put an empty replica in a voter's place.
			return fmt.Errorf("join: node %q is still being removed (its replicas are moving to the other nodes); it may join once they have", n.ID)
		}
		r.Nodes = slices.Delete(r.Nodes, i, i+1) // a departed node comes back as new
		break
	}
	j := *n
	j.State = StateActive
	r.Nodes = append(r.Nodes, j)
	return nil
}

func (r *Record) leave(id string) error {
	st, ok := r.State(id)
	switch {
	case !ok:
		return fmt.Errorf("leave: no node %q in the cluster", id)
	case st == StateLeaving:
		return nil // already leaving: asking again is harmless
	case st != StateActive:
		return fmt.Errorf("leave: node %q is %s", id, st)
	}
	if left := len(r.Active()) - 1; left < r.Replicas {
		return fmt.Errorf("leave: %d nodes would remain for a replication factor of %d; add a node first", left, r.Replicas)
	}
	return r.setState(id, StateLeaving, StateActive)
}

// setState moves node id to state to, if it is in one of from.
func (r *Record) setState(id, to string, from ...string) error {
	for i := range r.Nodes {
		if r.Nodes[i].ID != id {
			continue
		}
		if !slices.Contains(from, r.Nodes[i].State) {
			return fmt.Errorf("node %q is %s", id, StateName(r.Nodes[i].State))
		}
		r.Nodes[i].State = to
		return nil
	}
	return fmt.Errorf("no node %q in the cluster", id)
}

// StateName is a state as people read it: StateActive is "active".
func StateName(st string) string {
	if st == StateActive {
		return "active"
	}
	return st
}

// startMove records a move the mover begins. The bound is a constant, not
// the leader's --max-moves: every replica must decide alike.
func (r *Record) startMove(m *Move) error {
	switch {
	case m == nil || m.Shard < 0 || m.Shard >= len(r.Placement) || (m.Add == "" && m.Remove == ""):
		return fmt.Errorf("move-start: malformed move")
	case len(r.Moves) >= MaxMoves:
		return fmt.Errorf("move-start: %d moves are in progress already", len(r.Moves))
	}
	if _, busy := r.MoveOf(m.Shard); busy {
		return fmt.Errorf("move-start: shard %d is moving already", m.Shard)
	}
	if _, busy := r.SplitOf(m.Shard); busy {
		return fmt.Errorf("move-start: shard %d is splitting", m.Shard)
	}
	reps := r.Placement[m.Shard]
	if m.Add != "" {
		if st, ok := r.State(m.Add); !ok || st != StateActive {
			return fmt.Errorf("move-start: node %q is not an active member", m.Add)
		}
		if slices.Contains(reps, m.Add) {
			return fmt.Errorf("move-start: node %q already holds shard %d", m.Add, m.Shard)
		}
	}
	if m.Remove != "" && !slices.Contains(reps, m.Remove) {
		return fmt.Errorf("move-start: node %q holds no replica of shard %d", m.Remove, m.Shard)
	}
	r.Moves = append(r.Moves, *m)
	slices.SortFunc(r.Moves, func(a, b Move) int { return a.Shard - b.Shard })
	return nil
}

// finishMove records a move whose configuration changes are done: the
// added replica takes the removed one's place in the placement order.
func (r *Record) finishMove(m *Move) error {
	if err := r.dropMove(m); err != nil {
		return err
	}
	reps := r.Placement[m.Shard]
	if i := slices.Index(reps, m.Remove); m.Remove != "" && i >= 0 {
		if m.Add != "" {
			reps[i] = m.Add
		} else {
			reps = slices.Delete(reps, i, i+1)
		}
	} else if m.Add != "" && !slices.Contains(reps, m.Add) {
		reps = append(reps, m.Add)
	}
	r.Placement[m.Shard] = reps
	return nil
}

func (r *Record) dropMove(m *Move) error {
	if m == nil {
		return fmt.Errorf("move: malformed move")
	}
	i := slices.Index(r.Moves, *m)
	if i < 0 {
		return fmt.Errorf("move: no such move in progress on shard %d", m.Shard)
	}
	r.Moves = slices.Delete(r.Moves, i, i+1)
	return nil
}

// forgetDeparted bounds the record: only the newest MaxDeparted left or
// removed nodes are kept (a node forgotten and come back is told it is
// unknown, which it treats like removed).
func (r *Record) forgetDeparted() {
	n := 0
	for _, x := range r.Nodes {
		if x.State == StateLeft || x.State == StateRemoved {
			n++
		}
	}
	for i := 0; n > MaxDeparted && i < len(r.Nodes); {
		if st := r.Nodes[i].State; (st == StateLeft || st == StateRemoved) && !r.Holds(r.Nodes[i].ID) {
			r.Nodes = slices.Delete(r.Nodes, i, i+1)
			n--
			continue
		}
		i++
	}
}
