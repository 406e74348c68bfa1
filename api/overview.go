package api

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/quorate/quorate/api/ui"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/telemetry"
)

// Status page figures: how many top keys and events it shows.
const (
	overviewTopKeys   = 20
	overviewMaxEvents = 20
)

// overviewSource is the status page's data: this node's view of the
// cluster with every member's own report merged in.
type overviewSource struct{ node Node }

func (o overviewSource) Overview(ctx context.Context) (*ui.Overview, error) {
	st := o.node.Status()
	reports := o.node.Reports(ctx, telemetry.TopQuery{By: "denied", Window: defaultTopWindow, Limit: overviewTopKeys})
	ov := &ui.Overview{Node: st.GetNodeId(), Time: o.node.Now(), UnderReplicated: st.GetUnderReplicated()}
	byNode := map[string]*telemetry.Report{}
	for i := range reports {
		byNode[reports[i].Node] = &reports[i]
	}
	ov.Nodes, ov.PolicyVersionSkew = overviewNodes(st, byNode)
	for _, s := range st.GetShards() {
		ov.Shards = append(ov.Shards, ui.Shard{ID: s.GetId(), Leader: s.GetLeaderId(), Replicas: s.GetReplicas(), Term: s.GetTerm(), AppliedIndex: s.GetAppliedIndex()})
	}
	slices.SortFunc(ov.Shards, func(a, b ui.Shard) int { return int(a.ID) - int(b.ID) })
	for _, m := range st.GetMoves() {
		ov.Moves = append(ov.Moves, ui.Move{Shard: m.GetShard(), Add: m.GetAdd(), Remove: m.GetRemove()})
	}
	for _, s := range st.GetSplits() {
		ov.Splits = append(ov.Splits, ui.Split{Parent: s.GetParent(), Child: s.GetChild(), At: s.GetAt()})
	}
	ov.Policies = overviewPolicies(o.node, reports)
	ov.TopDenied = topDenied(reports, overviewTopKeys)
	ov.FailOpen = overviewEvents(reports)
	return ov, nil
}

// overviewNodes lists the members with their own reports, and the spread
// of the policy versions the reachable ones decide with.
func overviewNodes(st *pb.StatusResponse, byNode map[string]*telemetry.Report) ([]ui.Node, uint64) {
	var out []ui.Node
	var lo, hi uint64
	first := true
	for _, n := range st.GetNodes() {
		un := ui.Node{ID: n.GetId(), RPCAddr: n.GetRpcAddr(), HTTPAddr: n.GetHttpAddr(), Membership: n.GetMembership(),
			State: strings.ToLower(strings.TrimPrefix(n.GetState().String(), "NODE_STATE_"))}
		if r := byNode[n.GetId()]; r != nil {
			un.Error = r.Error
			un.Reachable = r.Error == ""
			if un.Reachable {
				un.Ready, un.PolicyVersion = r.Ready, r.PolicyVersion
				un.Leases = ui.Leases{Buckets: r.Leases.Buckets, Held: r.Leases.Held, Hits: uint64(r.Leases.Hits), Misses: uint64(r.Leases.Misses)}
				if first || r.PolicyVersion < lo {
					lo = r.PolicyVersion
				}
				hi, first = max(hi, r.PolicyVersion), false
			}
		}
		out = append(out, un)
	}
	slices.SortFunc(out, func(a, b ui.Node) int { return strings.Compare(a.ID, b.ID) })
	return out, hi - lo
}

// overviewPolicies sums each policy's totals over the reachable nodes,
// with its mode from the set this node decides with.
func overviewPolicies(node Node, reports []telemetry.Report) []ui.Policy {
	snap, _ := node.Policies()
	sum := map[string]*ui.Policy{}
	for _, r := range reports {
		for _, pt := range r.Policies {
			p := sum[pt.ID]
			if p == nil {
				p = &ui.Policy{ID: pt.ID}
				if pol, ok := snap.Policy(pt.ID); ok {
					p.Mode = cmp.Or(pol.Mode.String(), "HARD")
				}
				sum[pt.ID] = p
			}
			p.Allowed += pt.Allowed
			p.Denied += pt.Denied + pt.Unavailable + pt.Blocked
			p.ShadowWouldDeny += pt.ShadowWouldDeny
			p.FailOpen += pt.FailOpen
			p.SoftOver += pt.SoftOver
			p.Throttled += pt.Throttled
		}
	}
	out := make([]ui.Policy, 0, len(sum))
	for _, p := range sum {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b ui.Policy) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// overviewEvents merges the nodes' recent events, newest first.
func overviewEvents(reports []telemetry.Report) []ui.Event {
	var out []ui.Event
	for _, r := range reports {
		for _, e := range r.FailOpen {
			out = append(out, ui.Event{Time: e.Time, Node: e.Node, Policy: e.Policy, RequestID: e.RequestID, Reason: e.Reason, Key: e.Key})
		}
	}
	slices.SortFunc(out, func(a, b ui.Event) int { return b.Time.Compare(a.Time) })
	return out[:min(len(out), overviewMaxEvents)]
}
