package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/quorate/quorate/telemetry"
)

// telemetryFlags are the agent's flags for tracing and the decision log.
type telemetryFlags struct {
	traceEndpoint string
	traceSample   float64
}

func (f *telemetryFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.traceEndpoint, "trace-endpoint", "", "OpenTelemetry: an OTLP/HTTP collector's base URL (http://collector:4318) to send spans of checks, policy changes and Raft commits to; empty: no tracing")
	fl.Float64Var(&f.traceSample, "trace-sample", 0.01, "with --trace-endpoint, the fraction of traces started here that are kept; a caller's sampled traceparent is always followed")
}

// startTracing starts tracing as the flags say; stop flushes it.
func (f *telemetryFlags) startTracing(ctx context.Context, node string) (stop func(context.Context) error, err error) {
	if f.traceSample < 0 || f.traceSample > 1 {
		return nil, fmt.Errorf("--trace-sample %v: want a fraction from 0 to 1", f.traceSample)
	}
	stop, err = telemetry.StartTracing(ctx, telemetry.TracingConfig{Endpoint: f.traceEndpoint, Sample: f.traceSample, Service: "quorate", Node: node})
	if err != nil {
		return nil, fmt.Errorf("--trace-endpoint: %w", err)
	}
	return stop, nil
}

// flushTracing sends the spans still queued, for at most five seconds.
func flushTracing(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx)
}
