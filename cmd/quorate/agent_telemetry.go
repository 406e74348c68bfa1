package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/quorate/quorate/telemetry"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// telemetryFlags are the agent's flags for tracing and the decision log.
type telemetryFlags struct {
	traceEndpoint string
	traceSample   float64
	decisionLog   []string
	allowFraction float64
	logBuffer     int
}

func (f *telemetryFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.traceEndpoint, "trace-endpoint", "", "OpenTelemetry: an OTLP/HTTP collector's base URL (http://collector:4318) to send spans of checks, policy changes and Raft commits to; empty: no tracing")
	fl.Float64Var(&f.traceSample, "trace-sample", 0.01, "with --trace-endpoint, the fraction of traces started here that are kept; a caller's sampled traceparent is always followed")
	fl.StringArrayVar(&f.decisionLog, "decision-log", nil, "where the decision log goes (repeated): stdout, file:PATH[?max_size_mb=100&max_files=5&compress=true], or http(s)://collector/path (NDJSON batches POSTed; #auth_env=VAR names the Authorization value's variable); none: only quorate tail reads it")
	fl.Float64Var(&f.allowFraction, "decision-log-allows", decisionlog.DefaultAllowFraction, "fraction of allowed checks the decision log keeps (every deny, shadow would-deny and fail-open is kept); 0 keeps none")
	fl.IntVar(&f.logBuffer, "decision-log-buffer", decisionlog.DefaultBuffer, "records the decision log queues before it drops them (counted in quorate_decision_log_dropped_total)")
}

// decisionLog is the decision log's configuration; errors name the flag.
func (f *telemetryFlags) decisionLogConfig() (decisionlog.Config, error) {
	var c decisionlog.Config
	if f.allowFraction < 0 || f.allowFraction > 1 {
		return c, fmt.Errorf("--decision-log-allows %v: want a fraction from 0 to 1", f.allowFraction)
	}
	if f.logBuffer < 1 || f.logBuffer > decisionlog.MaxBuffer {
		return c, fmt.Errorf("--decision-log-buffer %d: want 1 to %d", f.logBuffer, decisionlog.MaxBuffer)
	}
	c.AllowFraction, c.NoAllows, c.Buffer = f.allowFraction, f.allowFraction == 0, f.logBuffer
	for _, spec := range f.decisionLog {
		s, err := decisionlog.ParseSink(spec)
		if err != nil {
			for _, made := range c.Sinks {
				_ = made.Close()
			}
			return c, fmt.Errorf("--decision-log: %s", strings.Replace(err.Error(), decisionlog.ErrConfig.Error()+": ", "", 1))
		}
		c.Sinks = append(c.Sinks, s)
	}
	return c, nil
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
