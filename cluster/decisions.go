package cluster

import (
	"context"
	"strings"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/telemetry"
)

// recentEvents bounds the fail-open events a node keeps for the status
// page.
const recentEvents = 50

// decisions keeps what operators read of the node's decisions: recent
// fail-open events (decide.Recorder). It runs on every check, so it only
// looks at each policy's verdict and copies what it keeps.
type decisions struct {
	node   string
	events *telemetry.Events
}

func newDecisions(node string) *decisions {
	return &decisions{node: node, events: telemetry.NewEvents(recentEvents)}
}

func (d *decisions) Decided(_ context.Context, rd *decide.Decided) {
	for i := range rd.Answer.Policies {
		pr := &rd.Answer.Policies[i]
		if pr.Reason == decide.FailOpen {
			d.events.Add(telemetry.Event{Time: rd.At, Node: d.node, Policy: pr.PolicyID, RequestID: rd.Request.ID,
				Reason: pr.Reason.Name(pr.Algorithm), Key: displayKey(pr.Key)})
		}
	}
}

// displayKey shows a bucket key's values as an operator writes them.
func displayKey(k string) string { return strings.ReplaceAll(k, "\x1f", "/") }
