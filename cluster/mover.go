package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/shard"
)

// The mover runs on the meta leader and nowhere else. Each tick it keeps
// the meta group's configuration in step with the record's members,
// replaces nodes dead past the grace, marks leaving nodes that hold nothing
// as left, plans replica moves with ring.Plan, and runs the moves recorded
// in the record. A move is add-then-remove: the new replica joins its
// group as a non-voter, is promoted once it has applied the log up to its
// own addition, and only then is the replaced one removed, so the group
// keeps a majority at every step. Every step is idempotent and the moves
// in progress live in the record, so a new meta leader resumes them.

const (
	moverTick      = 250 * time.Millisecond
	maxMetaVoters  = 5
	moveStepWait   = time.Minute // a step that takes longer is retried
	probeInterval  = 50 * time.Millisecond
	reconfigureTry = 10 * time.Second
)

type mover struct {
	n *Node

	mu        sync.Mutex
	running   map[int]bool // guarded by mu: shards whose move or split a goroutine runs
	splitting int          // guarded by mu: splits running

	dead      map[string]time.Time // node -> first seen not alive
	metaAdded map[string]uint64    // node -> index of its addition to meta
	warned    map[string]bool
}

// leadMeta runs the mover while this node leads the meta group.
func (n *Node) leadMeta() {
	if !n.moving.CompareAndSwap(false, true) {
		return
	}
	defer func() {
		n.moving.Store(false)
		// Leadership lost and won back while this loop was ending: the
		// observation that started a new one found this one running.
		if mg := n.metaReplica(); mg != nil && mg.IsLeader() && n.ctx.Err() == nil {
			go n.leadMeta()
		}
	}()
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	m := &mover{n: n, running: map[int]bool{}, dead: map[string]time.Time{}, metaAdded: map[string]uint64{}, warned: map[string]bool{}}
	t := time.NewTicker(moverTick)
	defer t.Stop()
	caughtUp := false
	for {
		mg := n.metaReplica()
		if mg == nil || !mg.IsLeader() {
			return
		}
		// A new leader applies what its predecessor committed last only
		// once an entry of its own term commits: act on nothing older.
		if !caughtUp {
			caughtUp = mg.Barrier(5*time.Second) == nil
		}
		if caughtUp {
			m.step(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *mover) step(ctx context.Context) {
	n := m.n
	rec := n.metaFSM.Record()
	if rec == nil || n.record() == nil {
		// The meta replica may lead before this node has opened its
		// shards and installed its record: the steps route by it.
		return
	}
	if st, _ := rec.State(n.cfg.NodeID); st != meta.StateActive {
		// A leaving leader hands the meta group over: the mover must run
		// on a node that stays.
		if err := n.metaReplica().TransferLeadership(); err != nil {
			n.log.Warn("handing the meta group over before leaving", "err", err)
		}
		return
	}
	n.observeRecord(rec)
	if m.metaMembers(ctx, rec) {
		return // one configuration change per tick
	}
	m.replaceDead(ctx, rec)
	m.markLeft(ctx, rec)
	m.plan(ctx, rec)
	cur := n.metaFSM.Record()
	m.runMoves(ctx, cur)
	m.runSplits(ctx, cur) // splitter.go
}

// metaMembers makes one change to the meta group's configuration if it
// differs from the record's members, and reports whether it did.
func (m *mover) metaMembers(ctx context.Context, rec *meta.Record) bool {
	n := m.n
	g := n.metaReplica()
	members, _, err := g.Members()
	if err != nil {
		return false
	}
	voters := 0
	in := map[string]shard.Member{}
	for _, mb := range members {
		in[mb.ID] = mb
		if mb.Voter {
			voters++
		}
	}
	for _, mb := range members {
		if !rec.Member(mb.ID) && mb.ID != n.cfg.NodeID {
			_, err := g.Remove(mb.ID, reconfigureTry)
			return m.metaChange(err, "removed", mb.ID)
		}
	}
	for _, info := range rec.Nodes {
		if _, ok := in[info.ID]; !ok && rec.Member(info.ID) {
			idx, err := g.AddNonvoter(shard.Peer{ID: info.ID, Addr: info.Peer}, reconfigureTry)
			if err == nil {
				m.metaAdded[info.ID] = idx
			}
			return m.metaChange(err, "added as a non-voter", info.ID)
		}
	}
	if voters >= maxMetaVoters {
		return false
	}
	for _, info := range rec.Nodes {
		if mb, ok := in[info.ID]; !ok || mb.Voter || info.State != meta.StateActive {
			continue
		}
		target, ok := m.metaAdded[info.ID]
		if !ok {
			target = g.AppliedIndex()
			m.metaAdded[info.ID] = target
		}
		if p := n.probeReplica(ctx, info, shard.MetaGroup); p == nil || !p.GetHosted() || p.GetIndex() < target {
			continue // not caught up yet
		}
		_, err := g.AddVoter(shard.Peer{ID: info.ID, Addr: info.Peer}, reconfigureTry)
		return m.metaChange(err, "promoted to voter", info.ID)
	}
	return false
}

func (m *mover) metaChange(err error, what, id string) bool {
	if err != nil {
		m.n.log.Warn("changing the meta group's members", "node", id, "step", what, "err", err)
		return true
	}
	m.n.log.Info("meta group: "+what, "node", id)
	return true
}

// replaceDead replaces an active node that gossip has not seen alive for
// the dead-node grace, if enough active nodes remain to hold every shard's
// replicas without it (replacing one of three nodes at three replicas
// would gain nothing and make its return a rebuild).
func (m *mover) replaceDead(ctx context.Context, rec *meta.Record) {
	n := m.n
	members := n.gossip.Members()
	now := n.clock()
	active := rec.Active()
	for _, id := range active {
		if id == n.cfg.NodeID {
			continue
		}
		if mm := members[id]; mm != nil && mm.State != memberlist.StateDead && mm.State != memberlist.StateLeft {
			delete(m.dead, id)
			delete(m.warned, id)
			continue
		}
		since, ok := m.dead[id]
		if !ok {
			m.dead[id] = now
			continue
		}
		if now.Sub(since) < n.cfg.DeadNodeGrace {
			continue
		}
		if len(active)-1 < rec.Replicas {
			if !m.warned[id] {
				n.log.Warn("a node is dead past the grace but is not replaced: too few nodes would remain for the replication factor",
					"node", id, "active", len(active), "replicas", rec.Replicas)
				m.warned[id] = true
			}
			continue
		}
		n.log.Warn("replacing a node dead past the grace: its replicas are rebuilt on the others", "node", id, "dead_for", now.Sub(since).Round(time.Second))
		if _, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpReplace, ID: id}); err != nil {
			n.log.Warn("replacing a dead node", "node", id, "err", err)
		}
		delete(m.dead, id)
		return // one at a time: the next tick sees the new record
	}
}

// markLeft records that a leaving node holds nothing any more: it may go.
func (m *mover) markLeft(ctx context.Context, rec *meta.Record) {
	for _, info := range rec.Nodes {
		if info.State == meta.StateLeaving && !rec.Holds(info.ID) {
			if _, err := m.n.proposeRecord(ctx, &meta.Command{Op: meta.OpLeft, ID: info.ID}); err != nil {
				m.n.log.Warn("recording a node as left", "node", info.ID, "err", err)
			}
		}
	}
}

// plan starts the next moves ring.Plan finds, up to --max-moves at once.
func (m *mover) plan(ctx context.Context, rec *meta.Record) {
	n := m.n
	room := meta.MaxMoves - len(rec.Moves)
	if room <= 0 {
		return
	}
	busy := map[int]bool{}
	for _, mv := range rec.Moves {
		busy[mv.Shard] = true
	}
	for _, sp := range rec.Splits {
		busy[sp.Parent], busy[sp.Child] = true, true // moves wait for the split
	}
	normal := n.cfg.MaxMoves - len(rec.Moves)
	for _, p := range ring.Plan(rec.Placement, rec.Active(), rec.Replicas, room, busy) {
		// Moves off a departed node come first and may exceed --max-moves:
		// moves stuck on a node that never opens its groups must not hold
		// back the repair of a dead node's shards.
		if st, _ := rec.State(p.Remove); p.Remove == "" || st == meta.StateActive {
			if normal <= 0 {
				return
			}
			normal--
		}
		mv := meta.Move{Shard: p.Shard, Add: p.Add, Remove: p.Remove}
		if _, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpMoveStart, Move: &mv}); err != nil {
			n.log.Warn("starting a replica move", "shard", mv.Shard, "add", mv.Add, "remove", mv.Remove, "err", err)
			return
		}
		n.metrics.Move("started", 0)
	}
}

// runMoves runs each recorded move no goroutine runs yet.
func (m *mover) runMoves(ctx context.Context, rec *meta.Record) {
	for _, mv := range rec.Moves {
		m.mu.Lock()
		busy := m.running[mv.Shard]
		m.running[mv.Shard] = true
		m.mu.Unlock()
		if busy {
			continue
		}
		go func() {
			defer func() {
				m.mu.Lock()
				delete(m.running, mv.Shard)
				m.mu.Unlock()
			}()
			m.runMove(ctx, rec, mv)
		}()
	}
}

func (m *mover) runMove(ctx context.Context, rec *meta.Record, mv meta.Move) {
	n := m.n
	start := time.Now()
	op, outcome := meta.OpMoveDone, "done"
	err := m.moveReplica(ctx, rec, mv)
	switch {
	case errors.Is(err, errMoveGone):
		return
	case errors.Is(err, errMoveAbandoned):
		op, outcome, err = meta.OpMoveAbort, "aborted", nil
	}
	if err == nil {
		_, err = n.proposeRecord(ctx, &meta.Command{Op: op, Move: &mv})
	}
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("replica move: a step failed; retrying", "shard", mv.Shard, "add", mv.Add, "remove", mv.Remove, "err", err)
			n.metrics.Move("retried", 0)
		}
		return
	}
	n.metrics.Move(outcome, time.Since(start))
	n.log.Info("replica move "+outcome, "shard", mv.Shard, "add", mv.Add, "remove", mv.Remove, "took", time.Since(start).Round(time.Millisecond))
}

// errMoveAbandoned: the node the move adds is no longer active (it left or
// was replaced meanwhile); the move is dropped and the planner starts over.
var errMoveAbandoned = errors.New("the node the move adds is no longer active")

// moveReplica takes the move's Raft steps at the shard's leader. Before
// each it checks that the record still holds the move: a mover that lost
// its place (a new meta leader finished or dropped the move) takes none.
func (m *mover) moveReplica(ctx context.Context, rec *meta.Record, mv meta.Move) error {
	n := m.n
	group := shard.ShardGroup(mv.Shard)
	step := func(action pb.ReconfigureAction, id string) (uint64, error) {
		if !m.recorded(mv) {
			return 0, errMoveGone
		}
		info, _ := rec.Node(id)
		return n.reconfigureAt(ctx, mv.Shard, action, info)
	}
	if mv.Add != "" {
		if cur := n.metaFSM.Record(); cur != nil {
			if st, _ := cur.State(mv.Add); st != meta.StateActive {
				return m.abandon(ctx, rec, mv)
			}
		}
		add, _ := rec.Node(mv.Add)
		// The new replica opens its group when it applies the move's
		// start; until then the leader's replication would back off.
		if err := waitUntil(ctx, moveStepWait, func() bool {
			p := n.probeReplica(ctx, add, group)
			return p != nil && p.GetHosted()
		}); err != nil {
			return fmt.Errorf("%s has not opened %s: %w", mv.Add, group, err)
		}
		idx, err := step(pb.ReconfigureAction_RECONFIGURE_ACTION_ADD_NONVOTER, mv.Add)
		if err != nil {
			return err
		}
		if err := waitUntil(ctx, moveStepWait, func() bool {
			p := n.probeReplica(ctx, add, group)
			return p != nil && p.GetIndex() >= idx
		}); err != nil {
			return fmt.Errorf("%s has not caught up on %s: %w", mv.Add, group, err)
		}
		if _, err := step(pb.ReconfigureAction_RECONFIGURE_ACTION_ADD_VOTER, mv.Add); err != nil {
			return err
		}
	}
	if mv.Remove != "" {
		if _, err := step(pb.ReconfigureAction_RECONFIGURE_ACTION_REMOVE, mv.Remove); err != nil {
			return err
		}
	}
	return nil
}

// errMoveGone: the record no longer holds the move; nothing to do.
var errMoveGone = errors.New("the move is no longer in the record")

// recorded reports whether the meta replica's record still holds mv.
func (m *mover) recorded(mv meta.Move) bool {
	cur := m.n.metaFSM.Record()
	if cur == nil {
		return false
	}
	got, ok := cur.MoveOf(mv.Shard)
	return ok && got == mv
}

// abandon ends a move whose added node went away. If the move's remove
// step already ran (a mover before this one got that far), the group has
// the departed node in the removed one's place: the move is done, and the
// planner moves that replica off next. Otherwise the added replica, if
// any, leaves the group and the move is aborted.
func (m *mover) abandon(ctx context.Context, rec *meta.Record, mv meta.Move) error {
	n := m.n
	if mv.Remove != "" {
		resp, err := n.atLeader(ctx, mv.Shard, pb.ReconfigureAction_RECONFIGURE_ACTION_SERVERS, meta.NodeInfo{})
		if err != nil {
			return err
		}
		if !slices.Contains(resp.GetServers(), mv.Remove) {
			return nil
		}
	}
	if !m.recorded(mv) {
		return errMoveGone
	}
	add, _ := rec.Node(mv.Add)
	if _, err := n.reconfigureAt(ctx, mv.Shard, pb.ReconfigureAction_RECONFIGURE_ACTION_REMOVE, add); err != nil {
		return err
	}
	return errMoveAbandoned
}

func waitUntil(ctx context.Context, d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(probeInterval):
		}
	}
	return nil
}

// reconfigureAt applies a configuration step at shard s's leader,
// following NOT_LEADER answers, and returns the change's log index.
func (n *Node) reconfigureAt(ctx context.Context, s int, action pb.ReconfigureAction, srv meta.NodeInfo) (uint64, error) {
	resp, err := n.atLeader(ctx, s, action, srv)
	return resp.GetIndex(), err
}

// atLeader sends one Reconfigure request to shard s's leader, wherever it
// is, following NOT_LEADER answers until one takes it.
func (n *Node) atLeader(ctx context.Context, s int, action pb.ReconfigureAction, srv meta.NodeInfo) (*pb.ReconfigureResponse, error) {
	return n.atLeaderReq(ctx, s, &pb.ReconfigureRequest{Group: shard.ShardGroup(s), Action: action, ServerId: srv.ID, ServerAddress: srv.Peer})
}

// atLeaderReq sends req to shard s's leader, following NOT_LEADER answers
// until one takes it.
func (n *Node) atLeaderReq(ctx context.Context, s int, req *pb.ReconfigureRequest) (*pb.ReconfigureResponse, error) {
	action, id := req.GetAction(), req.GetServerId()
	ctx, cancel := context.WithTimeout(ctx, moveStepWait)
	defer cancel()
	for {
		if ctx.Err() != nil { // the mover lost the meta group: take no step
			return nil, ctx.Err()
		}
		resp, err := n.reconfigureOnce(ctx, s, req)
		if err == nil && !resp.GetNotLeader() {
			return resp, nil
		}
		if resp.GetLeaderId() != "" {
			n.host.Hint(s, resp.GetLeaderId())
		} else {
			n.host.Hint(s, "") // ask the replicas in turn
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("no leader of %s took the step", req.GetGroup())
			}
			return nil, fmt.Errorf("%s %s: %w", action, id, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) reconfigureOnce(ctx context.Context, s int, req *pb.ReconfigureRequest) (*pb.ReconfigureResponse, error) {
	target := n.leaderOf(s)
	if target == "" {
		target = n.replicaFor(s)
	}
	if target == n.cfg.NodeID || target == "" {
		return n.reconfigureLocal(ctx, req)
	}
	rec := n.record()
	if rec == nil {
		return &pb.ReconfigureResponse{NotLeader: true}, nil
	}
	info, ok := rec.Node(target)
	if !ok {
		return &pb.ReconfigureResponse{NotLeader: true}, nil
	}
	f, err := n.peers.Get(info.Peer)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, reconfigureTry+time.Second)
	defer cancel()
	return f.Internal.Reconfigure(cctx, req)
}

// probeReplica asks node info about its replica of group; nil if it cannot answer.
func (n *Node) probeReplica(ctx context.Context, info meta.NodeInfo, group string) *pb.ReconfigureResponse {
	req := &pb.ReconfigureRequest{Group: group, Action: pb.ReconfigureAction_RECONFIGURE_ACTION_PROBE}
	if info.ID == n.cfg.NodeID {
		resp, _ := n.reconfigureLocal(ctx, req)
		return resp
	}
	f, err := n.peers.Get(info.Peer)
	if err != nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := f.Internal.Reconfigure(cctx, req)
	if err != nil {
		return nil
	}
	return resp
}
