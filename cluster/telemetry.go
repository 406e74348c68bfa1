package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/telemetry"
)

// reportTimeout bounds how long a peer's report is waited for: the status
// page must render with a node down.
const reportTimeout = time.Second

// report is this node's own account, with the top keys q asks for.
func (n *Node) report(q telemetry.TopQuery) telemetry.Report {
	snap, _ := n.Policies()
	r := telemetry.Report{Node: n.cfg.NodeID, Ready: n.Ready(), PolicyVersion: snap.Version(),
		Policies: n.metrics.PolicyTotals(), FailOpen: n.decided.events.Recent(), Top: n.decided.topKeys(q, n.clock())}
	if lt := n.engine.Leases(); lt != nil {
		hits, misses := lt.Decisions()
		r.Leases = telemetry.LeaseReport{Buckets: int64(lt.Buckets()), Held: lt.Held(), Hits: hits, Misses: misses}
	}
	return r
}

// Reports gathers every member's report: this node's own, and each other
// node's over the peer port, asked in parallel. A node gossip reports
// down, or one that does not answer within a second, has a report with
// only its Error set.
func (n *Node) Reports(ctx context.Context, q telemetry.TopQuery) []telemetry.Report {
	rec := n.record()
	if rec == nil {
		return []telemetry.Report{n.report(q)}
	}
	members := n.gossip.Members()
	out := make([]telemetry.Report, len(rec.Nodes))
	var wg sync.WaitGroup
	for i, info := range rec.Nodes {
		switch m := members[info.ID]; {
		case info.ID == n.cfg.NodeID:
			out[i] = n.report(q)
		case m == nil || m.State == memberlist.StateDead || m.State == memberlist.StateLeft:
			out[i] = telemetry.Report{Node: info.ID, Error: "down (gossip)"}
		case info.Peer == "":
			out[i] = telemetry.Report{Node: info.ID, Error: "no peer address"}
		default:
			wg.Go(func() { out[i] = n.askReport(ctx, info.ID, info.Peer, q) })
		}
	}
	wg.Wait()
	return out
}

func (n *Node) askReport(ctx context.Context, id, addr string, q telemetry.TopQuery) telemetry.Report {
	fail := func(err error) telemetry.Report { return telemetry.Report{Node: id, Error: err.Error()} }
	p, err := n.peers.Get(addr)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	resp, err := p.Internal.Telemetry(ctx, &pb.TelemetryRequest{Policy: q.Policy, By: q.By,
		WindowMs: uint32(q.Window / time.Millisecond), Limit: uint32(q.Limit)})
	if err != nil {
		return fail(err)
	}
	var r telemetry.Report
	if err := json.Unmarshal(resp.GetReport(), &r); err != nil {
		return fail(fmt.Errorf("report: %w", err))
	}
	r.Node = id // a node speaks for itself only
	return r
}

// Telemetry serves this node's report to a peer.
func (s internalServer) Telemetry(_ context.Context, req *pb.TelemetryRequest) (*pb.TelemetryResponse, error) {
	q := telemetry.TopQuery{Policy: req.GetPolicy(), By: req.GetBy(),
		Window: time.Duration(req.GetWindowMs()) * time.Millisecond, Limit: int(req.GetLimit())}
	b, err := json.Marshal(s.n.report(q))
	if err != nil {
		return nil, err
	}
	return &pb.TelemetryResponse{Report: b}, nil
}
