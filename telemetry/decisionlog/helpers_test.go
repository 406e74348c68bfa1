package decisionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/quorate/quorate/internal/await"
)

func TestMain(m *testing.M) {
	// lumberjack starts a goroutine per file that compresses and removes
	// old files and has no way to stop it.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"))
}

// memSink keeps every line it is given.
type memSink struct {
	name string
	mu   sync.Mutex
	data bytes.Buffer // guarded by mu
	n    int          // lines; guarded by mu
}

func (s *memSink) Name() string {
	if s.name == "" {
		return "mem"
	}
	return s.name
}
func (s *memSink) Batching() Batching { return Batching{MaxRecords: 64, MaxBytes: 16 << 10} }
func (s *memSink) Close() error       { return nil }
func (s *memSink) Write(_ context.Context, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data.Write(b)
	s.n += bytes.Count(b, []byte("\n"))
	return nil
}

func (s *memSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *memSink) lines() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.SplitAfter(bytes.Clone(s.data.Bytes()), []byte("\n"))[:bytes.Count(s.data.Bytes(), []byte("\n"))]
}

// records decodes every line, failing the test on one that is not JSON.
func (s *memSink) records(t *testing.T) []Record {
	t.Helper()
	var rs []Record
	for _, l := range s.lines() {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// blockSink blocks in Write until release is closed.
type blockSink struct {
	entered chan struct{} // closed when the first Write starts
	release chan struct{}
	once    sync.Once
}

func newBlockSink() *blockSink {
	return &blockSink{entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *blockSink) Name() string       { return "blocked" }
func (s *blockSink) Batching() Batching { return Batching{MaxRecords: 16, MaxBytes: 16 << 10} }
func (s *blockSink) Close() error       { return nil }
func (s *blockSink) Write(context.Context, []byte) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return nil
}

// metric is a counter's value in reg, found by name and one label.
func metric(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// waitFor waits until cond holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.True(t, 20*time.Second, what, cond)
}

func closeLogger(t *testing.T, l *Logger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2026, 3, 1, 3, 12, 0, 123456789, time.UTC)

// typical is a deny as a node would log it (about 180 bytes without its
// policies).
func typical(i int) *Record {
	return &Record{
		Time:          t0.Add(time.Duration(i) * time.Microsecond),
		RequestID:     fmt.Sprintf("req-%08d", i),
		TraceID:       "4bf92f3577b34da6a3ce929d0e0e4736",
		Node:          "n1",
		Source:        "grpc",
		Mode:          "leased",
		Decision:      "DENY",
		Reason:        "OVER_LIMIT",
		Policy:        "plan_free",
		PolicyVersion: 7,
		LatencyUS:     42,
		Descriptors:   Descriptors{TenantID: "t_1", APIKeyID: "k_1", Route: "/v1/search", Method: "GET"},
		Policies: []Verdict{
			{ID: "plan_free", Mode: "HARD", Decision: "DENY", Reason: "OVER_LIMIT", Remaining: 0, Limit: 10, Key: "t_1"},
		},
	}
}
