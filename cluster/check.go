package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/shard"
)

var (
	// errNoDecision: the shard could not decide within the deadline; the
	// items' fail modes answer.
	errNoDecision = errors.New("cluster: shard could not decide in time")
	// errRejected: the leader refused a forwarded batch as malformed.
	errRejected = errors.New("cluster: forwarded batch rejected")
)

type rateLimiterServer struct {
	pb.UnimplementedRateLimiterServer
	n *Node
}

func (s rateLimiterServer) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	resp, err := s.n.check(ctx, req)
	if err == nil && req.GetMode() != pb.Mode_MODE_LEASED {
		s.n.hintLeaders(ctx, resp) // hint.go
	}
	return resp, err
}

// check decides a request: validate everything, decide each shard's items
// atomically at its leader (shards in parallel), and, when the request is
// denied, refund what other shards allowed. A request with descriptors is
// resolved against the policies first (decide.go).
func (n *Node) check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	if req.GetDescriptors() != nil {
		return n.checkDescriptors(ctx, req)
	}
	start := time.Now()
	items, err := parseRequest(req, &n.cfg.Limits)
	if err != nil {
		return nil, err
	}
	leased := req.GetMode() == pb.Mode_MODE_LEASED && !req.GetDryRun()
	if leased {
		if err := leasable(items); err != nil {
			return nil, err
		}
	}
	if req.GetDryRun() {
		peekAll(items)
	}
	results, decision, err := n.decide(ctx, items, leased)
	if err != nil {
		return nil, err
	}
	n.observeCheck(modeLabel(leased), start, results, decision)
	return &pb.CheckResponse{Decision: decision, Results: results, Reason: requestReason(results, decision), DryRun: req.GetDryRun()}, nil
}

func modeLabel(leased bool) string {
	if leased {
		return "leased"
	}
	return "strict"
}

// peekAll turns a request into a dry run: every Take becomes a Peek, which
// reports the same decision and consumes nothing.
func peekAll(items []item) {
	for i := range items {
		items[i].op.Kind = fsm.OpPeek
		items[i].op.IdempotencyKey = ""
	}
}

// decide decides validated items, leased from this node's budget or strict
// at their shards' leaders. Soft items (soft and shadow policies) are
// decided outside the request's all-or-nothing group: their denial does not
// deny the request, and a denied request gives back what they took too.
func (n *Node) decide(ctx context.Context, items []item, leased bool) ([]*pb.ItemResult, pb.Decision, error) {
	n.mu.RLock()
	r := n.mu.ring
	n.mu.RUnlock()
	if r == nil {
		return nil, 0, status.Error(codes.Unavailable, "node is not part of a bootstrapped cluster yet")
	}
	ctx, cancel := n.checkContext(ctx) // deadline.go
	defer cancel()
	if leased && n.leases != nil {
		results, decision := n.checkLeased(ctx, items)
		return results, decision, nil
	}
	if ctx.Err() != nil {
		// The caller's deadline is inside the reserve: no strict decision
		// can reach it in time. Trying would cost the shard work, and a
		// fail mode's answer would count as the shard's unavailability.
		return nil, 0, status.Errorf(codes.DeadlineExceeded, "the deadline leaves no time to decide (the node keeps max(10%%, %s) of it for the answer)", minReserve)
	}

	byShard := map[int][]int{}
	for i := range items {
		s := r.ShardFor(items[i].op.Key)
		byShard[s] = append(byShard[s], i)
	}
	shards := make([]int, 0, len(byShard))
	for s := range byShard {
		shards = append(shards, s)
	}
	slices.Sort(shards)

	results := make([]*pb.ItemResult, len(items))
	if len(shards) == 1 {
		n.decideShard(ctx, shards[0], byShard[shards[0]], items, results)
	} else {
		var wg sync.WaitGroup
		for _, s := range shards {
			wg.Go(func() { n.decideShard(ctx, s, byShard[s], items, results) })
		}
		wg.Wait()
	}

	decision := requestDecision(items, results)
	if decision == pb.Decision_DECISION_DENY {
		n.refundAcrossShards(shards, byShard, items, results)
	}
	return results, decision, nil
}

// requestDecision denies if any hard item denied.
func requestDecision(items []item, results []*pb.ItemResult) pb.Decision {
	for i, res := range results {
		if res.Decision != pb.Decision_DECISION_ALLOW && !items[i].soft {
			return pb.Decision_DECISION_DENY
		}
	}
	return pb.Decision_DECISION_ALLOW
}

// requestReason is the reason of the result that decided: the first denial
// that is not a refund, else the first result's.
func requestReason(results []*pb.ItemResult, d pb.Decision) pb.Reason {
	if d == pb.Decision_DECISION_DENY {
		for _, res := range results {
			if res.Decision == pb.Decision_DECISION_DENY && res.Reason != pb.Reason_REASON_REFUNDED {
				return res.Reason
			}
		}
	}
	if len(results) > 0 {
		return results[0].Reason
	}
	return pb.Reason_REASON_UNSPECIFIED
}

func (n *Node) observeCheck(mode string, start time.Time, results []*pb.ItemResult, decision pb.Decision) {
	for _, res := range results {
		n.metrics.checks.WithLabelValues(mode, decisionLabel(res.Decision), reasonLabel(res.Reason)).Inc()
	}
	n.metrics.requests.WithLabelValues(mode, decisionLabel(decision)).Inc()
	n.metrics.latency.WithLabelValues(mode).Observe(time.Since(start).Seconds())
}

// decideShard decides the items idx, which all live on shard s: the hard
// ones all-or-nothing, the soft ones each on its own, in parallel.
func (n *Node) decideShard(ctx context.Context, s int, idx []int, items []item, results []*pb.ItemResult) {
	hard, soft := splitSoft(idx, items)
	if len(soft) == 0 {
		n.decideGroup(ctx, s, hard, items, results, true)
		return
	}
	var wg sync.WaitGroup
	if len(hard) > 0 {
		wg.Go(func() { n.decideGroup(ctx, s, hard, items, results, true) })
	}
	n.decideGroup(ctx, s, soft, items, results, false)
	wg.Wait()
}

func splitSoft(idx []int, items []item) (hard, soft []int) {
	for _, i := range idx {
		if items[i].soft {
			soft = append(soft, i)
		} else {
			hard = append(hard, i)
		}
	}
	return hard, soft
}

func (n *Node) decideGroup(ctx context.Context, s int, idx []int, items []item, results []*pb.ItemResult, atomic bool) {
	ops := make([]fsm.Op, len(idx))
	for j, i := range idx {
		ops[j] = items[i].op
	}
	a, err := n.submit(ctx, s, ops, atomic)
	// An atomic group with a moved op was rolled back whole in its entry
	// (fsm's settleGroups), so all of it is decided again.
	groupMoved := err == nil && atomic && slices.ContainsFunc(a.Results, movedResult)
	var moved []int
	for j, i := range idx {
		switch {
		case err != nil:
			results[i] = n.failMode(items[i], s)
		case groupMoved || movedResult(a.Results[j]):
			moved = append(moved, i)
		default:
			results[i] = itemResult(a.Results[j], s, a.Index, a.Now)
			results[i].Algorithm = items[i].algorithm()
			items[i].replayed = a.Results[j].Replayed
		}
	}
	if len(moved) > 0 {
		n.reroute(ctx, s, moved, items, results, atomic)
	}
}

func movedResult(r fsm.Result) bool { return errors.Is(r.Err, fsm.ErrMoved) }

// refund applies refunds on shard s; those a split moved away since the
// take (fsm.ErrMoved: nothing applied) follow their keys to the new shard.
func (n *Node) refund(ctx context.Context, s int, ops []fsm.Op) error {
	a, err := n.submit(ctx, s, ops, false)
	if err != nil {
		return err
	}
	var moved []fsm.Op
	for j, r := range a.Results {
		if movedResult(r) {
			moved = append(moved, ops[j])
		}
	}
	if len(moved) == 0 {
		return nil
	}
	r := n.awaitRoute(ctx, s, moved)
	if r == nil {
		return errNoDecision
	}
	by := map[int][]fsm.Op{}
	for _, op := range moved {
		s2 := r.ShardFor(op.Key)
		by[s2] = append(by[s2], op)
	}
	for s2, sub := range by {
		if err := n.refund(ctx, s2, sub); err != nil {
			return err
		}
	}
	return nil
}

// awaitRoute waits until this node's record routes one of ops' keys off
// shard s (a split's child took its range) and returns that routing, or
// nil if ctx ends first.
func (n *Node) awaitRoute(ctx context.Context, s int, ops []fsm.Op) *ring.Ring {
	for {
		n.mu.RLock()
		cur := n.mu.ring
		n.mu.RUnlock()
		for i := range ops {
			if cur.ShardFor(ops[i].Key) != s {
				return cur
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// reroute decides again items that shard s refused because their range
// moved to a split's child: nothing of them was applied. Once this node's
// record routes them elsewhere they go to their new shards; if it does not
// before ctx ends, their fail modes answer.
func (n *Node) reroute(ctx context.Context, s int, idx []int, items []item, results []*pb.ItemResult, atomic bool) {
	ops := make([]fsm.Op, len(idx))
	for j, i := range idx {
		ops[j] = items[i].op
	}
	r := n.awaitRoute(ctx, s, ops)
	if r == nil {
		n.metrics.rerouted.WithLabelValues("expired").Add(float64(len(idx)))
		for _, i := range idx {
			results[i] = n.failMode(items[i], s)
		}
		return
	}
	n.metrics.rerouted.WithLabelValues("sent").Add(float64(len(idx)))
	by := map[int][]int{}
	for _, i := range idx {
		s2 := r.ShardFor(items[i].op.Key)
		by[s2] = append(by[s2], i)
	}
	for s2, sub := range by {
		n.decideGroup(ctx, s2, sub, items, results, atomic)
	}
}

func itemResult(r fsm.Result, s int, index uint64, now int64) *pb.ItemResult {
	res := &pb.ItemResult{
		Decision:          pb.Decision_DECISION_ALLOW,
		Reason:            pb.Reason_REASON_WITHIN_LIMIT,
		Limit:             r.Limit,
		Remaining:         r.Remaining,
		ResetAfter:        durationpb.New(r.ResetAfter),
		RetryAfter:        durationpb.New(jitter(r.RetryAfter)),
		Delay:             durationpb.New(r.Delay),
		Shard:             int64(s),
		Index:             index,
		DecidedAtUnixNano: now,
	}
	switch {
	case r.Refunded:
		res.Decision, res.Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_REFUNDED
	case !r.Allowed || r.Err != nil:
		res.Decision, res.Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_OVER_LIMIT
	}
	return res
}

// jitter lengthens a retry-after by up to 10%, at most maxJitter, so that
// the clients a limit denied together do not all come back at one instant.
// Never shorter: retrying earlier than the exact wait would be denied again.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + rand.N(min(d/10, maxJitter)+1)
}

const maxJitter = time.Second

// failMode answers an item whose shard could not decide in time: open
// allows with FAIL_OPEN, closed denies with UNAVAILABLE. Neither looks like
// a normal decision.
func (n *Node) failMode(it item, s int) *pb.ItemResult {
	res := &pb.ItemResult{Limit: it.op.Limit.Capacity(), Shard: int64(s), ResetAfter: durationpb.New(0), RetryAfter: durationpb.New(0), Delay: durationpb.New(0)}
	switch {
	case it.fail == pb.FailMode_FAIL_MODE_CLOSED:
		res.Decision, res.Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_UNAVAILABLE
		res.RetryAfter = durationpb.New(n.breakerCooldown())
		n.metrics.unavailable.WithLabelValues("closed").Inc()
	case it.emergencyCap != nil && !n.caps.allow(it.op.Key, *it.emergencyCap, it.op.Cost, time.Now(), it.op.Kind == fsm.OpPeek):
		res.Decision, res.Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_UNAVAILABLE
		res.RetryAfter = durationpb.New(n.breakerCooldown())
		n.metrics.unavailable.WithLabelValues("capped").Inc()
	default:
		res.Decision, res.Reason = pb.Decision_DECISION_ALLOW, pb.Reason_REASON_FAIL_OPEN
		n.metrics.unavailable.WithLabelValues("open").Inc()
	}
	return res
}

func (n *Node) breakerCooldown() time.Duration {
	if b := n.breaker.Load(); b != nil {
		return b.cooldown
	}
	return 0
}

// refundAcrossShards gives back what a denied multi-shard request took on
// the shards that allowed it. Within a shard, items are refunded in the same
// log entry that decided them; across shards a compensating Refund follows.
// Until it commits the consumption is visible to other checks, and if it
// cannot commit (the shard became unavailable) the consumption stands:
// under-admission, never over.
func (n *Node) refundAcrossShards(shards []int, byShard map[int][]int, items []item, results []*pb.ItemResult) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.CheckTimeout)
	defer cancel()
	// Refunds go where each item was decided: a split may have moved it
	// from the shard it was first sent to (reroute).
	decidedAt := map[int][]int{}
	var at []int
	for _, s := range shards {
		for _, i := range byShard[s] {
			d := int(results[i].GetShard())
			if _, ok := decidedAt[d]; !ok {
				at = append(at, d)
			}
			decidedAt[d] = append(decidedAt[d], i)
		}
	}
	var wg sync.WaitGroup
	for _, s := range at {
		var ops []fsm.Op
		var idx []int
		for _, i := range decidedAt[s] {
			// A replayed take is the first request's, already admitted:
			// refunding it would give that request's unit back (and forget
			// its record), so a retry could be admitted again and again.
			if results[i].Reason == pb.Reason_REASON_WITHIN_LIMIT && items[i].op.Kind == fsm.OpTake && !items[i].replayed {
				op := items[i].op
				op.Kind = fsm.OpRefund
				op.At = results[i].GetDecidedAtUnixNano() // windows refund only the window that counted it
				ops, idx = append(ops, op), append(idx, i)
			}
		}
		if len(ops) == 0 {
			continue
		}
		wg.Go(func() {
			if err := n.refund(ctx, s, ops); err != nil {
				n.metrics.refunds.WithLabelValues("failed").Add(float64(len(ops)))
				return
			}
			n.metrics.refunds.WithLabelValues("ok").Add(float64(len(ops)))
			for _, i := range idx {
				results[i].Decision, results[i].Reason = pb.Decision_DECISION_DENY, pb.Reason_REASON_REFUNDED
			}
		})
	}
	wg.Wait()
}

// submit applies ops on shard s at its leader, wherever that is, retrying
// while the leader is unknown, moving or unreachable, until ctx ends. An
// error means the items must be answered by their fail mode; the ops may or
// may not have been applied. Only the shard's own failures feed its
// breaker (outcomeOf).
func (n *Node) submit(ctx context.Context, s int, ops []fsm.Op, atomic bool) (shard.Applied, error) {
	if ctx.Err() != nil {
		// No time left (a deadline shorter than the reserve): trying would
		// only take the breaker's probe from a check that has time.
		return shard.Applied{}, errNoDecision
	}
	br := n.breaker.Load()
	if !br.allow(s) {
		return shard.Applied{}, errNoDecision
	}
	a, err := n.retry(ctx, s, ops, atomic)
	br.done(s, outcomeOf(ctx, err))
	return a, err
}

func (n *Node) retry(ctx context.Context, s int, ops []fsm.Op, atomic bool) (shard.Applied, error) {
	wait := 5 * time.Millisecond
	for {
		a, retry, err := n.attempt(ctx, s, ops, atomic)
		if !retry {
			return a, err
		}
		select {
		case <-ctx.Done():
			return shard.Applied{}, errNoDecision
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// attempt tries once. retry means nothing was applied and trying again may
// succeed.
func (n *Node) attempt(ctx context.Context, s int, ops []fsm.Op, atomic bool) (a shard.Applied, retry bool, err error) {
	leader := n.leaderOf(s)
	if leader == "" {
		if n.hosts(s) {
			return a, true, nil // an election: wait for it
		}
		// Not a replica, so Raft tells this node nothing: ask a replica,
		// which applies the batch if it leads, else names the leader.
		if leader = n.replicaFor(s); leader == "" {
			return a, true, nil
		}
	}
	if leader == n.cfg.NodeID {
		n.mu.RLock()
		sh := n.mu.shards[s]
		n.mu.RUnlock()
		if sh == nil {
			// A stale hint: this node's replica moved away since.
			n.leaders.set(s, "")
			return a, true, nil
		}
		a, err = sh.Submit(ctx, ops, atomic)
		if errors.Is(err, shard.ErrNotLeader) {
			return a, true, nil
		}
		return a, false, err
	}
	n.mu.RLock()
	info, ok := n.mu.rec.Node(leader)
	n.mu.RUnlock()
	if !ok {
		return a, true, nil
	}
	f, err := n.peers.get(info.Peer)
	if err != nil {
		return a, true, nil
	}
	reply, err := f.forward(ctx, &pb.ShardBatch{Shard: uint32(s), Command: fsm.AppendCommand(nil, &fsm.Command{Ops: ops}), Atomic: atomic})
	var unreachable errUnreachable
	switch {
	case errors.Is(err, errForwardShed):
		return a, true, nil // nothing sent; the leader is still the one to ask
	case errors.As(err, &unreachable):
		n.leaders.set(s, "")
		return a, true, nil
	case err != nil:
		return a, false, err
	}
	switch reply.GetError() {
	case pb.ForwardError_FORWARD_ERROR_NONE:
	case pb.ForwardError_FORWARD_ERROR_NOT_LEADER:
		if reply.GetLeaderId() != leader {
			n.leaders.set(s, reply.GetLeaderId())
		} else {
			n.leaders.set(s, "")
		}
		return a, true, nil
	case pb.ForwardError_FORWARD_ERROR_REJECTED:
		return a, false, fmt.Errorf("%w: %s", errRejected, reply.GetMessage())
	default:
		return a, false, errors.New(reply.GetMessage())
	}
	rs, err := fsm.DecodeResults(reply.GetResults())
	if err != nil || len(rs) != len(ops) {
		return a, false, errors.New("cluster: malformed forward reply")
	}
	return shard.Applied{Results: rs, Index: reply.GetIndex(), Now: reply.GetAppliedAtUnixNano()}, false, nil
}

func decisionLabel(d pb.Decision) string {
	if d == pb.Decision_DECISION_ALLOW {
		return "allow"
	}
	return "deny"
}

var reasonLabels = map[pb.Reason]string{
	pb.Reason_REASON_WITHIN_LIMIT: "within_limit",
	pb.Reason_REASON_OVER_LIMIT:   "over_limit",
	pb.Reason_REASON_FAIL_OPEN:    "fail_open",
	pb.Reason_REASON_UNAVAILABLE:  "unavailable",
	pb.Reason_REASON_REFUNDED:     "refunded",
}

func reasonLabel(r pb.Reason) string {
	if l, ok := reasonLabels[r]; ok {
		return l
	}
	return "unspecified"
}
