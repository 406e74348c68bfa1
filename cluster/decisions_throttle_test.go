package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// TestDecisionRecordsThrottle: with no allows sampled, a THROTTLE is
// logged all the same, with its delay and the policy's verdict.
func TestDecisionRecordsThrottle(t *testing.T) {
	ps, err := policy.Parse("t.yaml", []byte(`
policies:
  - policy_id: shaped
    key: [tenant_id]
    algorithm: GCRA
    config: { rate: 1/min, burst: 1 }
    mode: THROTTLE
    throttle: { max_delay: 1m }
`))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	d, err := newDecisions("n1", prometheus.NewRegistry(), decisionlog.Config{Sinks: []decisionlog.Sink{decisionlog.NewWriterSink("stdout", &out)}, NoAllows: true})
	if err != nil {
		t.Fatal(err)
	}
	e := decide.New(decide.Config{Shards: newMemShards(1), Policies: benchPolicies{snap}, Recorder: d})
	defer e.Close()
	for _, id := range []string{"r1", "r2"} {
		if _, err := e.Check(context.Background(), &decide.Request{ID: id, Descriptors: &decide.Descriptors{TenantID: "t1"}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.log.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1 (the THROTTLE; the ALLOW is not sampled):\n%s", len(lines), out.b.String())
	}
	var r decisionlog.Record
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatal(err)
	}
	// r2 waits one interval of 1/min less the time since r1.
	if r.RequestID != "r2" || r.Decision != "THROTTLE" || r.Reason != "THROTTLED" || r.DelayMs <= 50_000 || r.DelayMs > 60_000 || r.SampleRate != 1 {
		t.Errorf("record %+v, want r2 THROTTLE THROTTLED held about 60s", r)
	}
	if len(r.Policies) != 1 || r.Policies[0].Decision != "THROTTLE" || r.Policies[0].Mode != "THROTTLE" {
		t.Errorf("verdicts %+v, want shaped THROTTLE", r.Policies)
	}
}
