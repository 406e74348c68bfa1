package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracingConfig turns on OpenTelemetry tracing. Tracing is off unless
// Endpoint is set: then every span starts by asking the sampler, so a
// check that is not sampled costs one branch.
type TracingConfig struct {
	// Endpoint is an OTLP/HTTP collector's base URL
	// (http://collector:4318); spans go to its /v1/traces.
	Endpoint string
	// Sample is the fraction of traces started here that are kept
	// (default 0.01); a trace an incoming request already sampled is
	// always kept, one it did not sample never is.
	Sample float64
	// Service and Node name the process in every span.
	Service, Node string
	// Queue bounds the spans waiting for export or being exported
	// (default 2048); past it a span is dropped and counted in
	// quorate_trace_spans_total{outcome="dropped"}.
	Queue int
}

// traceSpans counts the sampled spans by what became of them. It is one
// collector for the process (tracing is), registered by every New.
var traceSpans = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "quorate_trace_spans_total",
	Help: "Sampled spans by outcome: exported; dropped because the export queue was full (--trace-endpoint slower than the spans); failed, lost in an export that failed.",
}, []string{"outcome"})

// boundedProcessor sits in front of the SDK's batch processor and keeps
// it from dropping anything itself, which it does without a count: a span
// is passed on only while fewer than limit are queued or in export.
type boundedProcessor struct {
	sdktrace.SpanProcessor
	pending                   atomic.Int64
	limit                     int64
	dropped, exported, failed prometheus.Counter
}

func (p *boundedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		p.SpanProcessor.OnEnd(s) // the batch processor ignores it
		return
	}
	if p.pending.Add(1) > p.limit {
		p.pending.Add(-1)
		p.dropped.Inc()
		return
	}
	p.SpanProcessor.OnEnd(s)
}

// countingExporter releases a batch's spans from pending as it leaves.
type countingExporter struct {
	sdktrace.SpanExporter
	p *boundedProcessor
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	defer e.p.pending.Add(-int64(len(spans)))
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.p.failed.Add(float64(len(spans)))
	} else {
		e.p.exported.Add(float64(len(spans)))
	}
	return err
}

// tracer is set while tracing is on: spans are only started then.
var tracer atomic.Pointer[trace.Tracer]

// Propagator reads and writes trace context: W3C traceparent and baggage.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// StartTracing installs the exporter and sampler of cfg; the returned func
// flushes and stops it. With no Endpoint it does nothing.
func StartTracing(ctx context.Context, cfg TracingConfig) (stop func(context.Context) error, err error) {
	if cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("trace endpoint %q: want http(s)://host:port", cfg.Endpoint)
	}
	if cfg.Sample < 0 || cfg.Sample > 1 {
		return nil, fmt.Errorf("trace sample %v: want a fraction from 0 to 1", cfg.Sample)
	}
	if cfg.Sample == 0 {
		cfg.Sample = 0.01
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 2048
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.JoinPath("/v1/traces").String()), otlptracehttp.WithTimeout(5 * time.Second)}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("trace exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.Service), attribute.String("service.instance.id", cfg.Node))
	bp := &boundedProcessor{limit: int64(cfg.Queue), dropped: traceSpans.WithLabelValues("dropped"),
		exported: traceSpans.WithLabelValues("exported"), failed: traceSpans.WithLabelValues("failed")}
	// The batch processor's queue holds at least what pending allows, so
	// it never drops on its own.
	bp.SpanProcessor = sdktrace.NewBatchSpanProcessor(countingExporter{exp, bp}, sdktrace.WithMaxQueueSize(cfg.Queue))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Sample))),
		sdktrace.WithSpanProcessor(bp),
	)
	otel.SetTracerProvider(tp)
	t := tp.Tracer("github.com/quorate/quorate")
	tracer.Store(&t)
	return func(ctx context.Context) error {
		tracer.Store(nil)
		return tp.Shutdown(ctx)
	}, nil
}

// Tracing reports whether spans are being made.
func Tracing() bool { return tracer.Load() != nil }

// StartSpan starts a span when tracing is on; otherwise it returns ctx and
// a span that records nothing, without allocating.
func StartSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	t := tracer.Load()
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return (*t).Start(ctx, name, trace.WithAttributes(attrs...))
}

// TraceID is the hex trace id of ctx's span ("" if none).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
