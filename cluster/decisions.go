package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/telemetry"
	"github.com/quorate/quorate/telemetry/decisionlog"
	"github.com/quorate/quorate/telemetry/topk"
)

// What a node keeps of its decisions for operators: the last fail-open
// events, and top keys for at most topPolicies policies (each up to about
// 257 KB with every window full, so about 64 MB at worst; a policy past
// the bound is counted in quorate_topk_dropped_total, not tracked).
const (
	recentEvents = 50
	topPolicies  = 256
)

// decisions keeps what operators read of the node's decisions
// (decide.Recorder): recent fail-open events and the top keys of each
// policy. It runs on every check, so it only looks at each policy's
// verdict and copies what it keeps.
type decisions struct {
	node   string
	events *telemetry.Events
	top    *topk.Tracker
	log    *decisionlog.Logger
}

// newDecisions starts the node's decision log (with no sinks, it serves
// live tails only) and top-K tracker.
func newDecisions(node string, reg prometheus.Registerer, logCfg decisionlog.Config) (*decisions, error) {
	top, err := topk.New(topk.Config{MaxPolicies: topPolicies})
	if err != nil {
		return nil, err
	}
	if err := top.Register(reg); err != nil {
		return nil, err
	}
	logCfg.Registerer, logCfg.Node = reg, node
	log, err := decisionlog.New(logCfg)
	if err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "quorate_decision_log_subscribers", Help: "Live tails of this node's decision log (quorate tail) open now.",
	}, func() float64 { return float64(log.Subscribers()) })); err != nil {
		return nil, err
	}
	return &decisions{node: node, events: telemetry.NewEvents(recentEvents), top: top, log: log}, nil
}

// close flushes the decision log's sinks, for at most a few seconds.
func (d *decisions) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = d.log.Close(ctx)
}

func (d *decisions) Decided(ctx context.Context, rd *decide.Decided) {
	d.logDecision(ctx, rd)
	cost := int64(1)
	if ds := rd.Request.Descriptors; ds != nil && ds.Cost > 0 {
		cost = ds.Cost
	}
	for i := range rd.Answer.Policies {
		pr := &rd.Answer.Policies[i]
		d.top.Observe(pr.PolicyID, pr.Key, cost, denies(pr), rd.At)
		if pr.Reason == decide.FailOpen {
			d.events.Add(telemetry.Event{Time: rd.At, Node: d.node, Policy: pr.PolicyID, RequestID: rd.Request.ID,
				Reason: pr.Reason.Name(pr.Algorithm), Key: displayKey(pr.Key)})
		}
	}
}

// denies: the policy denied the request, or, in shadow, would have (the
// keys a shadow policy would throttle are what its operator wants to
// see before enforcing it). A refund is not a denial.
func denies(pr *decide.PolicyResult) bool {
	return pr.Decision == decide.Deny && pr.Reason != decide.Refunded || pr.Reason == decide.ShadowWouldDeny
}

// tick ends the top-K slots that are over, so that checks rarely pay for
// it, every ten seconds until ctx ends.
func (d *decisions) tick(ctx context.Context, clock func() time.Time) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.top.Tick(clock())
		}
	}
}

// topKeys are this node's top keys q asks for, whole per policy.
func (d *decisions) topKeys(q telemetry.TopQuery, now time.Time) []topk.Summary {
	by, err := topk.ParseKind(q.By)
	if err != nil || q.Window <= 0 {
		return nil
	}
	sums, err := d.top.Summaries(now, q.Window, by, q.Policy, d.top.K())
	if err != nil {
		return nil
	}
	return sums
}

// displayKey shows a bucket key's values as an operator writes them.
func displayKey(k string) string { return strings.ReplaceAll(k, "\x1f", "/") }
