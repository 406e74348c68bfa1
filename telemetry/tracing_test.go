package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/propagation"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver: it keeps the spans' names by
// trace id.
type collector struct {
	mu    sync.Mutex
	spans map[string][]string // hex trace id -> span names
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				id := hexOf(sp.GetTraceId())
				c.spans[id] = append(c.spans[id], sp.GetName())
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestTracing: off, a span is the caller's (nothing made, nothing
// allocated); on, a span continues the caller's W3C trace, a trace the
// caller did not sample is not kept, and spans reach the OTLP endpoint.
func TestTracing(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	parent := func(flags string) context.Context {
		h := http.Header{}
		h.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-"+flags)
		return Propagator.Extract(context.Background(), propagation.HeaderCarrier(h))
	}
	ctx := parent("01")
	if got := TraceID(ctx); got != traceID {
		t.Fatalf("TraceID of the caller's context = %q, want %q", got, traceID)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		_, span := StartSpan(ctx, "off")
		span.End()
	}); allocs != 0 || Tracing() {
		t.Fatalf("tracing off: %v allocs per span, want 0", allocs)
	}
	c := &collector{spans: map[string][]string{}}
	srv := httptest.NewServer(c)
	defer srv.Close()
	if _, err := StartTracing(context.Background(), TracingConfig{Endpoint: "collector:4318"}); err == nil {
		t.Fatal("an endpoint without a scheme was taken")
	}
	if _, err := StartTracing(context.Background(), TracingConfig{Endpoint: srv.URL, Sample: 2}); err == nil {
		t.Fatal("a sample of 2 was taken")
	}
	stop, err := StartTracing(context.Background(), TracingConfig{Endpoint: srv.URL, Sample: 1, Service: "quorate", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := StartSpan(ctx, "quorate.Check")
	span.End()
	_, unsampled := StartSpan(parent("00"), "quorate.Unsampled")
	unsampled.End()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stop(sctx); err != nil {
		t.Fatal(err)
	}
	if Tracing() {
		t.Fatal("still tracing after stop")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got := c.spans[traceID]; len(got) != 1 || got[0] != "quorate.Check" {
		t.Fatalf("spans of the caller's trace: %v, want [quorate.Check] (the unsampled one dropped); all: %v", got, c.spans)
	}
}

// TestTracingShedsCounted: while the collector does not answer, spans
// past the queue are dropped and counted, none silently; once it answers,
// the queued ones are exported.
func TestTracingShedsCounted(t *testing.T) {
	release := make(chan struct{})
	c := &collector{spans: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		c.ServeHTTP(w, r)
	}))
	defer srv.Close()
	exported, dropped := traceSpans.WithLabelValues("exported"), traceSpans.WithLabelValues("dropped")
	exported0, dropped0 := testutil.ToFloat64(exported), testutil.ToFloat64(dropped)
	stop, err := StartTracing(context.Background(), TracingConfig{Endpoint: srv.URL, Sample: 1, Service: "quorate", Node: "n1", Queue: 8})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		_, span := StartSpan(context.Background(), "quorate.Check")
		span.End()
	}
	if d := testutil.ToFloat64(dropped) - dropped0; d != 92 {
		t.Errorf("%v spans dropped while 8 waited for the collector; want 92", d)
	}
	close(release)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stop(sctx); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, names := range c.spans {
		n += len(names)
	}
	if e := testutil.ToFloat64(exported) - exported0; n != 8 || e != 8 {
		t.Errorf("the collector got %d spans, %v counted exported; want 8", n, e)
	}
}
