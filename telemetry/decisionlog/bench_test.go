package decisionlog

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func benchLogger(b *testing.B, c Config) (*Logger, *prometheus.Registry) {
	b.Helper()
	reg := prometheus.NewRegistry()
	c.Registerer = reg
	c.Sinks = []Sink{NewWriterSink("stdout", io.Discard)}
	l, err := New(c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close(b.Context()) })
	return l, reg
}

// What a check pays for an allow that is not logged: Wants and no Record.
func BenchmarkWantsAllowSampledOut(b *testing.B) {
	l, _ := benchLogger(b, Config{NoAllows: true})
	n := 0
	for b.Loop() {
		if l.Wants(Allow) {
			n++
		}
	}
	if n != 0 {
		b.Fatal(n)
	}
}

// Allows at the default fraction: nine in ten cost Wants alone, one in ten
// also builds and logs a Record.
func BenchmarkWantsLogAllowDefault(b *testing.B) {
	l, reg := benchLogger(b, Config{})
	for b.Loop() {
		if l.Wants(Allow) {
			r := Record{Decision: "ALLOW", Reason: "WITHIN_LIMIT", Policy: "plan_free", RequestID: "req-1",
				Descriptors: Descriptors{TenantID: "t_1", Route: "/v1/search"}}
			l.Log(&r)
		}
	}
	reportDrops(b, reg)
}

// A deny: Wants, a Record built by the caller, Log. The writer encodes
// more slowly than one goroutine can Log, so the queue fills and the rest
// are dropped (dropped/op says how many); either way Log returns.
func BenchmarkWantsLogDeny(b *testing.B) {
	l, reg := benchLogger(b, Config{})
	verdicts := typical(0).Policies
	for b.Loop() {
		if l.Wants(Deny) {
			r := Record{RequestID: "req-00000001", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Source: "grpc", Mode: "leased",
				Decision: "DENY", Reason: "OVER_LIMIT", Policy: "plan_free", PolicyVersion: 7, LatencyUS: 42,
				Descriptors: Descriptors{TenantID: "t_1", APIKeyID: "k_1", Route: "/v1/search", Method: "GET"},
				Policies:    verdicts}
			l.Log(&r)
		}
	}
	reportDrops(b, reg)
}

// A deny that the queue takes: the cost a check pays while the writer
// keeps up. The writer is not running; the benchmark empties the queue
// between rounds with the timer stopped.
func BenchmarkWantsLogDenyAccepted(b *testing.B) {
	l, err := newLogger(Config{Buffer: 8192})
	if err != nil {
		b.Fatal(err)
	}
	verdicts := typical(0).Policies
	for i := 0; i < b.N; i++ {
		if i%8192 == 0 {
			b.StopTimer()
			for len(l.queue) > 0 {
				<-l.queue
			}
			b.StartTimer()
		}
		if l.Wants(Deny) {
			r := Record{RequestID: "req-00000001", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Source: "grpc", Mode: "leased",
				Decision: "DENY", Reason: "OVER_LIMIT", Policy: "plan_free", PolicyVersion: 7, LatencyUS: 42,
				Descriptors: Descriptors{TenantID: "t_1", APIKeyID: "k_1", Route: "/v1/search", Method: "GET"},
				Policies:    verdicts}
			l.Log(&r)
		}
	}
}

func BenchmarkWantsLogDenyParallel(b *testing.B) {
	l, reg := benchLogger(b, Config{})
	r := typical(0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if l.Wants(Deny) {
				l.Log(r)
			}
		}
	})
	reportDrops(b, reg)
}

func reportDrops(b *testing.B, reg *prometheus.Registry) {
	b.StopTimer()
	t := &testing.T{}
	b.ReportMetric(metric(t, reg, "quorate_decision_log_dropped_total", "where", "queue")/float64(b.N), "dropped/op")
}

// The writer's encoding of a typical deny with one policy verdict.
func BenchmarkAppendJSON(b *testing.B) {
	r := typical(0)
	r.SampleRate = 1
	buf := r.AppendJSON(nil)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = r.AppendJSON(buf[:0])
	}
}

// The same record through encoding/json, for comparison.
func BenchmarkEncodingJSON(b *testing.B) {
	r := typical(0)
	r.SampleRate = 1
	buf, _ := json.Marshal(r)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := json.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
}

// The common allow line (no verdicts, two descriptors), about 180 bytes.
func BenchmarkAppendJSONAllow(b *testing.B) {
	r := Record{Time: t0, RequestID: "req-00000001", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Node: "n1",
		Source: "grpc", Mode: "leased", Decision: "ALLOW", Reason: "WITHIN_LIMIT", Policy: "plan_free",
		Descriptors: Descriptors{TenantID: "t_1", Route: "/v1/search"}, SampleRate: 0.1}
	buf := r.AppendJSON(nil)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = r.AppendJSON(buf[:0])
	}
}
