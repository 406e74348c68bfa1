package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/telemetry"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestDecisionRecords: with no allows sampled, the log has exactly the
// request a shadow policy would have denied and the denied one, each with
// its request id, source, descriptors, deciding policy and every policy's
// verdict with its key; the top keys count the denial and the would-denies.
func TestDecisionRecords(t *testing.T) {
	ps, err := policy.Parse("t.yaml", []byte(`
policies:
  - policy_id: hard
    scope: { tenant_id: "*" }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 2/1h }
  - policy_id: trial
    mode: SHADOW
    scope: { tenant_id: "*" }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 1/1h }
`))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile(ps, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	d, err := newDecisions("n1", prometheus.NewRegistry(), decisionlog.Config{Sinks: []decisionlog.Sink{decisionlog.NewWriterSink("stdout", &out)}, NoAllows: true})
	if err != nil {
		t.Fatal(err)
	}
	e := decide.New(decide.Config{Shards: newMemShards(2), Policies: benchPolicies{snap}, Recorder: d})
	defer e.Close()
	for _, id := range []string{"r1", "r2", "r3"} {
		if _, err := e.Check(context.Background(), &decide.Request{ID: id, Source: "http", Descriptors: &decide.Descriptors{TenantID: "t1", Route: "/x"}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.log.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (the would-deny and the deny):\n%s", len(lines), out.b.String())
	}
	var recs []decisionlog.Record
	for _, l := range lines {
		var r decisionlog.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		recs = append(recs, r)
	}
	if r := recs[0]; r.RequestID != "r2" || r.Decision != "ALLOW" || r.Reason != "SHADOW_WOULD_DENY" || r.SampleRate != 1 {
		t.Errorf("first record %+v, want r2's would-deny", r)
	}
	r := recs[1]
	if r.RequestID != "r3" || r.Decision != "DENY" || r.Policy != "hard" || r.Reason != "WINDOW_FULL" || r.Node != "n1" ||
		r.Source != "http" || r.Mode != "strict" || r.PolicyVersion != 3 || r.Descriptors.TenantID != "t1" || r.Descriptors.Route != "/x" {
		t.Errorf("second record %+v, want r3 denied by hard", r)
	}
	if len(r.Policies) != 2 || r.Policies[0].Key != "t1" || r.Policies[1].Key != "t1" {
		t.Errorf("verdicts %+v, want both policies keyed t1", r.Policies)
	}
	now := time.Now()
	for p, want := range map[string]int64{"hard": 1, "trial": 2} {
		top := d.topKeys(telemetryTop(p), now)
		if len(top) != 1 || len(top[0].Entries) != 1 || top[0].Entries[0].Key != "t1" || top[0].Entries[0].Count != want {
			t.Errorf("top denied of %s: %+v, want t1 %d times", p, top, want)
		}
	}
}

func telemetryTop(p string) telemetry.TopQuery {
	return telemetry.TopQuery{Policy: p, By: "denied", Window: time.Minute, Limit: 10}
}

// TestDecisionRecordDenyCache: a denial answered from the deny cache is
// logged as such; the shard's own denial before it is not.
func TestDecisionRecordDenyCache(t *testing.T) {
	ps, err := policy.Parse("t.yaml", []byte(`
policies:
  - policy_id: hard
    scope: { tenant_id: "*" }
    key: [tenant_id]
    algorithm: TOKEN_BUCKET
    config: { limit: 1/1h }
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
	e := decide.New(decide.Config{Shards: newMemShards(1), Policies: benchPolicies{snap}, Recorder: d, DenyCache: 8})
	defer e.Close()
	for _, id := range []string{"r1", "r2", "r3"} {
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
	if len(lines) != 2 || strings.Contains(lines[0], "deny_cache") || !strings.Contains(lines[1], `"deny_cache":true`) {
		t.Fatalf("want r2 denied by the shard, then r3 from the deny cache:\n%s", out.b.String())
	}
}
