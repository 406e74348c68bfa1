package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Membership faults. One scheduled Membership fault is four changes in a
// row, each waited out until the cluster has settled (no move or split in
// progress, no shard under-replicated): a spare node joins with an empty
// data dir; a shard splits in two (Admin.SplitShards); a node of the
// cluster is killed and, once gossip no longer reports it alive, replaced
// by the operator's path (Admin.RemoveNode, as quorate remove --node does),
// and then comes back with its data dir emptied, joining anew under its old
// name; the spare leaves. The workload
// keeps calling the cluster's own nodes meanwhile. The spare is not one of
// c.agents (the workload indexes those), so the cluster's node set is the
// same after the fault as before it.

// deadNodeGrace is what every agent of a run gets as --dead-node-grace:
// far longer than any fault keeps a node away (a kill's hold and restart, a
// partition, a pause), so that no fault becomes a permanent removal by
// itself: with five nodes the others can hold every shard's replicas, so a
// short grace would have the meta leader replace a node a partition merely
// isolated. A membership fault that means to replace a node says so
// (remove).
const deadNodeGrace = 30 * time.Minute

// settleTimeout bounds each of a membership fault's waits.
const settleTimeout = 2 * time.Minute

// membership runs the three changes, recording each as a Fault.
func (n *nemesis) membership(ctx context.Context, p planned) error {
	spare, err := n.c.newSpare()
	if err != nil {
		return err
	}
	defer n.c.stopSpare()
	ids := func(extra ...string) []string {
		var out []string
		for _, a := range n.c.agents {
			out = append(out, a.id)
		}
		return append(out, extra...)
	}

	f := Fault{Kind: Join, Target: spare.id, Start: time.Now()}
	err = n.c.startSpare(ctx)
	if err == nil {
		err = n.c.settle(ctx, ids(spare.id), nil)
	}
	if n.done(&f, err) != nil {
		return err
	}

	// The shard of a checked strict key, at its hash, so that the key moves
	// (the middle of the schedule's shard without one).
	target, at := p.Shard, uint64(0)
	if n.keyShard != nil {
		if s, h, ok := n.keyShard(p.Shard); ok {
			target, at = s, h
		}
	}
	f = Fault{Kind: Split, Target: fmt.Sprintf("shard %d", target), Start: time.Now()}
	err = n.c.split(ctx, target, at)
	if err == nil {
		err = n.c.settle(ctx, ids(spare.id), nil)
	}
	if n.done(&f, err) != nil {
		return err
	}

	victim := p.Perm[0]
	f = Fault{Kind: Replace, Target: n.c.agents[victim].id, Start: time.Now()}
	n.c.kill(victim)
	err = n.c.remove(ctx, n.c.agents[victim].id)
	if err == nil {
		err = n.c.settle(ctx, append(slices.DeleteFunc(ids(), func(id string) bool { return id == n.c.agents[victim].id }), spare.id),
			map[string]string{n.c.agents[victim].id: "removed"})
	}
	if err == nil {
		err = n.c.rejoin(ctx, victim)
	}
	if err == nil {
		err = n.c.settle(ctx, ids(spare.id), nil)
	}
	if n.done(&f, err) != nil {
		return err
	}

	f = Fault{Kind: Leave, Target: spare.id, Start: time.Now()}
	err = n.c.leaveSpare(ctx)
	if err == nil {
		err = n.c.settle(ctx, ids(), map[string]string{spare.id: "left"})
	}
	return n.done(&f, err)
}

// done records f, ended now, with err as its note, and returns err.
func (n *nemesis) done(f *Fault, err error) error {
	f.End = time.Now()
	if err != nil {
		f.Note = err.Error()
	}
	n.record(*f)
	n.lg("fault %-17s %-28s %s..%s %s", f.Kind, f.Target, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"), f.Note)
	return err
}

// newSpare makes the spare agent (the first time: the next address of the
// run's block, a certificate for it; later the same one again) with an
// empty data dir.
func (c *cluster) newSpare() (*agent, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spare != nil {
		return c.spare, os.RemoveAll(c.spare.data)
	}
	i := len(c.agents)
	base := c.agents[0]
	a := &agent{id: fmt.Sprintf("n%d", i+1),
		ip:   base.ip[:strings.LastIndexByte(base.ip, '.')+1] + fmt.Sprint(i+2),
		data: strings.TrimSuffix(base.data, base.id) + fmt.Sprintf("n%d", i+1),
		log:  strings.TrimSuffix(base.log, base.id+".log") + fmt.Sprintf("n%d.log", i+1)}
	if err := os.RemoveAll(a.data); err != nil {
		return nil, err
	}
	c.creds.Hosts = append(c.ips(), a.ip)
	if err := c.creds.Ensure([]string{a.id}); err != nil {
		return nil, fmt.Errorf("chaos: the spare's certificate: %w", err)
	}
	c.spare, c.spareIdx = a, c.lc.Add(a.node())
	return a, nil
}

func (c *cluster) startSpare(ctx context.Context) error {
	c.mu.Lock()
	a, i := c.spare, c.spareIdx
	c.mu.Unlock()
	if err := c.lc.Start(i); err != nil {
		return err
	}
	if err := c.lc.WaitReady(ctx, 60*time.Second, i); err != nil {
		return fmt.Errorf("chaos: the spare %s did not become ready (%v); see %s", a.id, err, a.log)
	}
	return nil
}

// leaveSpare asks the spare to leave and waits for it to exit.
func (c *cluster) leaveSpare(ctx context.Context) error {
	c.mu.Lock()
	a, i := c.spare, c.spareIdx
	c.mu.Unlock()
	cl, err := client.Dial(a.rpc(), c.dialOpts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if _, err := cl.Leave(lctx); err != nil {
		return fmt.Errorf("chaos: %s leave: %w", a.id, err)
	}
	select {
	case <-c.lc.Done(i):
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("chaos: %s left but did not exit; see %s", a.id, a.log)
	}
}

// stopSpare kills the spare if it still runs.
func (c *cluster) stopSpare() {
	c.mu.Lock()
	a, i := c.spare, c.spareIdx
	c.mu.Unlock()
	if a != nil {
		c.lc.Kill(i)
	}
}

// remove replaces node id, which the caller has killed, as an operator
// would (quorate remove --node): Admin.RemoveNode, asked of the nodes that
// are up until one records it. A node refuses while gossip still reports
// id alive, so this also waits for gossip to see it dead.
func (c *cluster) remove(ctx context.Context, id string) error {
	deadline := time.Now().Add(settleTimeout)
	var last error
	for time.Now().Before(deadline) {
		for i, up := range c.up() {
			if !up {
				continue
			}
			if last = c.removeVia(ctx, i, id); last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("chaos: removing %s in %s: %w", id, settleTimeout, last)
}

func (c *cluster) removeVia(ctx context.Context, i int, id string) error {
	cl, err := client.Dial(c.agents[i].rpc(), c.dialOpts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pb.NewAdminClient(cl.Conn()).RemoveNode(ctx, &pb.RemoveNodeRequest{NodeId: id})
	return err
}

// rejoin empties node i's data dir and starts it: it joins as a new node.
func (c *cluster) rejoin(ctx context.Context, i int) error {
	if err := os.RemoveAll(c.agents[i].data); err != nil {
		return err
	}
	if err := c.start(i); err != nil {
		return err
	}
	return c.waitReady(context.WithoutCancel(ctx), 60*time.Second, i)
}

// settle waits until a node that is up reports: no move in progress, no
// shard under-replicated, every shard's replicas on nodes in want, each of
// which holds some, and the given nodes in the given membership states.
func (c *cluster) settle(ctx context.Context, want []string, states map[string]string) error {
	return c.await(ctx, "the cluster did not settle", func(st *pb.StatusResponse) string { return unsettled(st, want, states) })
}

// await asks the first node that is up and answers for its status until
// problem finds none there, for up to settleTimeout.
func (c *cluster) await(ctx context.Context, what string, problem func(*pb.StatusResponse) string) error {
	deadline := time.Now().Add(settleTimeout)
	last := "no node answered"
	for time.Now().Before(deadline) {
		for i, up := range c.up() {
			if !up {
				continue
			}
			st, err := c.status(ctx, i)
			if err != nil {
				continue
			}
			if last = problem(st); last == "" {
				return nil
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("chaos: %s in %s: %s", what, settleTimeout, last)
}

func unsettled(st *pb.StatusResponse, want []string, states map[string]string) string {
	if len(st.GetMoves()) > 0 || len(st.GetUnderReplicated()) > 0 || len(st.GetSplits()) > 0 {
		return fmt.Sprintf("%d moves and %d splits in progress, %d shards under-replicated", len(st.GetMoves()), len(st.GetSplits()), len(st.GetUnderReplicated()))
	}
	held := map[string]bool{}
	for _, sh := range st.GetShards() {
		for _, id := range sh.GetReplicas() {
			if !slices.Contains(want, id) {
				return fmt.Sprintf("shard %d has a replica on %s", sh.GetId(), id)
			}
			held[id] = true
		}
	}
	for _, id := range want {
		if !held[id] {
			return id + " holds no replica yet"
		}
	}
	for _, nd := range st.GetNodes() {
		if want, ok := states[nd.GetId()]; ok && nd.GetMembership() != want {
			return fmt.Sprintf("%s is %q, not %s yet", nd.GetId(), nd.GetMembership(), want)
		}
	}
	return ""
}

func (c *cluster) status(ctx context.Context, i int) (*pb.StatusResponse, error) {
	cl, err := client.Dial(c.agents[i].rpc(), c.dialOpts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return cl.Status(ctx)
}

// split asks a node that is up to split shard s at hash at (0: in the
// middle of its range), and waits until a node reports the split done (the new shard
// routed, no split in progress).
func (c *cluster) split(ctx context.Context, s int, at uint64) error {
	var last error
	for i, up := range c.up() {
		if !up {
			continue
		}
		cl, err := client.Dial(c.agents[i].rpc(), c.dialOpts...)
		if err != nil {
			last = err
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := pb.NewAdminClient(cl.Conn()).SplitShards(sctx, &pb.SplitShardsRequest{Shards: []uint32{uint32(s)}, At: at})
		if status.Code(err) == codes.InvalidArgument && at != 0 {
			// The hash is the range's low bound: split in the middle.
			resp, err = pb.NewAdminClient(cl.Conn()).SplitShards(sctx, &pb.SplitShardsRequest{Shards: []uint32{uint32(s)}})
		}
		cancel()
		cl.Close()
		if err == nil && len(resp.GetSplits()) == 1 {
			return c.splitDone(ctx, resp.GetSplits()[0].GetChild())
		}
		last = err
	}
	return fmt.Errorf("chaos: splitting shard %d: %w", s, last)
}

// splitDone waits until a node that is up routes keys to shard child and
// has no split in progress.
func (c *cluster) splitDone(ctx context.Context, child uint32) error {
	return c.await(ctx, fmt.Sprintf("the split into shard %d was not done", child), func(st *pb.StatusResponse) string {
		switch {
		case len(st.GetSplits()) > 0:
			return fmt.Sprintf("%d splits in progress", len(st.GetSplits()))
		case !slices.ContainsFunc(st.GetRanges(), func(r *pb.ShardRange) bool { return r.GetShard() == child }):
			return fmt.Sprintf("shard %d owns no range yet", child)
		}
		return ""
	})
}
