package meta

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func testRecord(nodes, shards, replicas int) *Record {
	var infos []NodeInfo
	for i := range nodes {
		infos = append(infos, NodeInfo{ID: fmt.Sprintf("n%d", i+1), RPC: "r", Peer: "p"})
	}
	return NewRecord(infos, shards, replicas)
}

// step applies c to r and fails the test if it is refused.
func step(t *testing.T, r *Record, c Command) *Record {
	t.Helper()
	next, err := ApplyRecordOp(r, &c)
	if err != nil {
		t.Fatalf("%s: %v", c.Op, err)
	}
	if next.Epoch != r.Epoch+1 {
		t.Fatalf("%s: epoch %d after %d", c.Op, next.Epoch, r.Epoch)
	}
	if err := next.Validate(); err != nil {
		t.Fatalf("%s made an invalid record: %v", c.Op, err)
	}
	return next
}

// refused applies c to r and fails the test unless it is refused with an
// error containing want and r is left as it was.
func refused(t *testing.T, r *Record, c Command, want string) {
	t.Helper()
	before := r.Clone()
	next, err := ApplyRecordOp(r, &c)
	if err == nil || !strings.Contains(err.Error(), want) || next != nil {
		t.Fatalf("%s: %v, %v; want refused with %q", c.Op, next, err, want)
	}
	if r.Digest() != before.Digest() {
		t.Fatalf("%s: a refused command changed the record", c.Op)
	}
}

func TestMembershipJoinLeaveReplace(t *testing.T) {
	r := testRecord(3, 4, 3)
	n4 := NodeInfo{ID: "n4", RPC: "r4", Peer: "p4"}
	r = step(t, r, Command{Op: OpJoin, Node: &n4})
	if st, ok := r.State("n4"); !ok || st != StateActive || len(r.Active()) != 4 {
		t.Fatalf("after join: %+v", r.Nodes)
	}
	refused(t, r, Command{Op: OpJoin, Node: &n4}, "already a member")
	refused(t, r, Command{Op: OpJoin, Node: &NodeInfo{ID: "n9"}}, "needs an id, a peer and an rpc address")

	r = step(t, r, Command{Op: OpLeave, ID: "n4"})
	if st, _ := r.State("n4"); st != StateLeaving || r.Member("n4") != true || slices.Contains(r.Active(), "n4") {
		t.Fatalf("after leave: %+v", r.Nodes)
	}
	refused(t, r, Command{Op: OpLeave, ID: "n3"}, "2 nodes would remain for a replication factor of 3")
	refused(t, r, Command{Op: OpLeave, ID: "n7"}, "no node")
	refused(t, r, Command{Op: OpJoin, Node: &n4}, "already a member")

	// n4 holds a move's add: it may not be marked left until that is gone.
	r = step(t, r, Command{Op: OpJoin, Node: &NodeInfo{ID: "n5", RPC: "r5", Peer: "p5"}})
	mv := Move{Shard: 0, Add: "n5", Remove: "n1"}
	r = step(t, r, Command{Op: OpMoveStart, Move: &mv})
	r = step(t, r, Command{Op: OpLeft, ID: "n4"})
	if st, _ := r.State("n4"); st != StateLeft || r.Member("n4") {
		t.Fatalf("after left: %+v", r.Nodes)
	}
	refused(t, r, Command{Op: OpLeft, ID: "n1"}, "is active")
	leaving := step(t, r, Command{Op: OpLeave, ID: "n1"})
	refused(t, leaving, Command{Op: OpLeft, ID: "n1"}, "still holds replicas")

	r = step(t, r, Command{Op: OpReplace, ID: "n2"})
	if st, _ := r.State("n2"); st != StateRemoved || r.Member("n2") {
		t.Fatalf("after replace: %+v", r.Nodes)
	}
	refused(t, r, Command{Op: OpReplace, ID: "n2"}, "is removed")
	// Not while its replicas are still placed: it must have left every group.
	refused(t, r, Command{Op: OpJoin, Node: &NodeInfo{ID: "n2", RPC: "r2b", Peer: "p2b"}}, "still being removed")
	for s := range r.Placement {
		r.Placement[s] = slices.DeleteFunc(r.Placement[s], func(id string) bool { return id == "n2" })
	}
	// A removed node with an empty data dir may come back as new.
	r = step(t, r, Command{Op: OpJoin, Node: &NodeInfo{ID: "n2", RPC: "r2b", Peer: "p2b"}})
	if info, _ := r.Node("n2"); info.State != StateActive || info.Peer != "p2b" {
		t.Fatalf("rejoined n2: %+v", info)
	}

	// The same data dir asking again (its answer was lost) is the same
	// join; another one under that id is refused.
	n6 := NodeInfo{ID: "n6", RPC: "r6", Peer: "p6", Incarnation: "a"}
	r = step(t, r, Command{Op: OpJoin, Node: &n6})
	again := step(t, r, Command{Op: OpJoin, Node: &n6})
	if len(again.Nodes) != len(r.Nodes) {
		t.Fatalf("a repeated join added a node: %+v", again.Nodes)
	}
	refused(t, r, Command{Op: OpJoin, Node: &NodeInfo{ID: "n6", RPC: "r6", Peer: "p6", Incarnation: "b"}}, "already a member")
	refused(t, r, Command{Op: OpJoin, Node: &NodeInfo{ID: "n6", RPC: "r6", Peer: "p6"}}, "already a member")
}

func TestMembershipMoves(t *testing.T) {
	r := testRecord(4, 2, 3)
	s := 0
	var out string
	for _, id := range r.Active() {
		if !slices.Contains(r.Placement[s], id) {
			out = id
		}
	}
	in := r.Placement[s][1]
	before := slices.Clone(r.Placement[s])

	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: 2, Add: out}}, "malformed")
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: s}}, "malformed")
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: s, Add: in}}, "already holds")
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: s, Add: "n9"}}, "not an active member")
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: s, Add: out, Remove: out}}, "holds no replica")
	refused(t, r, Command{Op: OpMoveDone, Move: &Move{Shard: s, Add: out, Remove: in}}, "no such move")

	mv := Move{Shard: s, Add: out, Remove: in}
	r = step(t, r, Command{Op: OpMoveStart, Move: &mv})
	if !r.Wants(out, s) || !r.Wants(in, s) || !r.Holds(out) {
		t.Fatalf("during the move both replicas are wanted: %+v", r)
	}
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: s, Add: "n1", Remove: "n2"}}, "moving already")
	r = step(t, r, Command{Op: OpMoveDone, Move: &mv})
	want := slices.Clone(before)
	want[1] = out // the new replica takes the old one's place in the order
	if !slices.Equal(r.Placement[s], want) || len(r.Moves) != 0 || r.Wants(in, s) {
		t.Fatalf("after the move: placement %v moves %v; want %v", r.Placement[s], r.Moves, want)
	}

	// An add alone appends; a remove alone deletes; an abort changes nothing.
	grow := Move{Shard: 1, Add: func() string {
		for _, id := range r.Active() {
			if !slices.Contains(r.Placement[1], id) {
				return id
			}
		}
		return ""
	}()}
	r = step(t, r, Command{Op: OpMoveStart, Move: &grow})
	r = step(t, r, Command{Op: OpMoveDone, Move: &grow})
	if len(r.Placement[1]) != 4 || r.Placement[1][3] != grow.Add {
		t.Fatalf("after an add: %v", r.Placement[1])
	}
	shrink := Move{Shard: 1, Remove: r.Placement[1][0]}
	r = step(t, r, Command{Op: OpMoveStart, Move: &shrink})
	aborted := step(t, r, Command{Op: OpMoveAbort, Move: &shrink})
	if len(aborted.Moves) != 0 || !slices.Equal(aborted.Placement[1], r.Placement[1]) {
		t.Fatalf("after an abort: %+v", aborted)
	}
	r = step(t, r, Command{Op: OpMoveDone, Move: &shrink})
	if len(r.Placement[1]) != 3 || slices.Contains(r.Placement[1], shrink.Remove) {
		t.Fatalf("after a remove: %v", r.Placement[1])
	}
}

func TestMembershipBounds(t *testing.T) {
	r := testRecord(3, MaxMoves+1, 1)
	for i := range 2 * MaxDeparted {
		id := fmt.Sprintf("x%03d", i)
		r = step(t, r, Command{Op: OpJoin, Node: &NodeInfo{ID: id, RPC: "r", Peer: "p"}})
		r = step(t, r, Command{Op: OpReplace, ID: id})
	}
	departed := 0
	for _, n := range r.Nodes {
		if !r.Member(n.ID) {
			departed++
		}
	}
	if departed != MaxDeparted {
		t.Fatalf("%d departed nodes kept; want the newest %d", departed, MaxDeparted)
	}
	if _, ok := r.Node(fmt.Sprintf("x%03d", 2*MaxDeparted-1)); !ok {
		t.Fatal("the newest departed node was forgotten")
	}
	for s := range MaxMoves {
		add := "n1"
		if slices.Contains(r.Placement[s], add) {
			add = "n2"
		}
		r = step(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: s, Add: add}})
	}
	refused(t, r, Command{Op: OpMoveStart, Move: &Move{Shard: MaxMoves, Add: "n3"}}, "in progress already")
}

// TestMetaRecordCommands: the meta state machine applies record commands,
// tells the node, refuses bad ones without a change, and its snapshot
// keeps the epoch and the moves in progress.
func TestMetaRecordCommands(t *testing.T) {
	var f FSM
	told := 0
	f.OnRecord = func() { told++ }
	rec := testRecord(3, 2, 3)
	b, _ := json.Marshal(rec)
	f.Apply(b)
	if told != 1 || f.Record() == nil {
		t.Fatalf("storing the record: told %d, record %v", told, f.Record())
	}
	res := applyMeta(t, &f, Command{Op: OpJoin, Node: &NodeInfo{ID: "n4", RPC: "r", Peer: "p"}})
	if res.Err != "" || res.Record == nil || res.Record.Epoch != 1 || f.Record().Epoch != 1 || told != 2 {
		t.Fatalf("join: %+v, told %d", res, told)
	}
	res = applyMeta(t, &f, Command{Op: OpLeave, ID: "n9"})
	if res.Err == "" || res.Record != nil || f.Record().Epoch != 1 || told != 2 {
		t.Fatalf("a refused leave: %+v, epoch %d, told %d", res, f.Record().Epoch, told)
	}
	mv := Move{Shard: 0, Add: "n4"}
	if res = applyMeta(t, &f, Command{Op: OpMoveStart, Move: &mv}); res.Err != "" {
		t.Fatal(res.Err)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var g FSM
	if err := g.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if r := g.Record(); r.Epoch != 2 || len(r.Moves) != 1 || r.Moves[0] != mv {
		t.Fatalf("restored: %+v", r)
	}
}
