package bench

import (
	"math"
	"time"

	"github.com/quorate/quorate/bench/accuracy"
	"github.com/quorate/quorate/bench/latency"
)

// RunResult is the outcome of one target in one scenario, merged over its
// rounds: one object of quorate bench's JSON output. The field names are a
// contract with scripts; add fields, never rename them.
type RunResult struct {
	Scenario string   `json:"scenario,omitempty"`
	Target   string   `json:"target"` // quorate, redis, noop
	Mode     string   `json:"mode"`   // strict, leased; lua for the Redis baseline, allow for the noop one
	Addrs    []string `json:"addrs,omitempty"`
	// API is how the checks were sent: unary (RateLimiter.Check) or stream
	// (RateLimiter.CheckStream); absent for Redis.
	API string `json:"api,omitempty"`

	Workload     string  `json:"workload"`
	Load         string  `json:"load"`
	Distribution string  `json:"distribution"`
	Keys         int     `json:"keys"`
	Items        int     `json:"items"`
	Cost         int64   `json:"cost"`
	Algorithm    string  `json:"algorithm"`
	Limit        int64   `json:"limit"`
	PeriodS      float64 `json:"period_s"`
	Burst        int64   `json:"burst"`
	Concurrency  int     `json:"concurrency"`
	Rate         float64 `json:"rate"` // requests/s of an open loop; 0 for a closed loop
	Seed         uint64  `json:"seed"`
	Rounds       int     `json:"rounds"`

	DurationS       float64           `json:"duration_s"` // measured time, rounds added up
	Requests        int64             `json:"requests"`
	Checks          int64             `json:"checks"`
	RequestsPerSec  float64           `json:"requests_per_sec"`
	ChecksPerSec    float64           `json:"checks_per_sec"`
	AllowedRequests int64             `json:"allowed_requests"`
	Errors          int64             `json:"errors"`
	ErrorsByCode    map[string]int64  `json:"errors_by_code"`
	ErrorExamples   map[string]string `json:"error_examples,omitempty"`
	// Reasons counts the items of successful requests by reason.
	Reasons map[string]int64 `json:"reasons"`

	LatencyMS LatencyMS `json:"latency_ms"`
	// ServiceMS is, in an open loop, latency from the actual send rather
	// than the schedule; the gap between the two is queueing.
	ServiceMS *LatencyMS    `json:"service_ms,omitempty"`
	OpenLoop  *OpenLoopInfo `json:"open_loop,omitempty"`

	Admitted       int64   `json:"admitted"`
	AllowedByLimit int64   `json:"allowed_by_limit"`
	OverAdmitted   int64   `json:"over_admitted"`
	UnderAdmitted  int64   `json:"under_admitted"`
	AdmissionRatio float64 `json:"admission_ratio"` // admitted / allowed_by_limit
	AccuracyNote   string  `json:"accuracy_note,omitempty"`

	// CPUCores is the average cores each metered process kept busy:
	// "tool" for quorate bench itself, the others by node id or
	// command:pid.
	CPUCores            map[string]float64 `json:"cpu_cores"`
	ServerCores         float64            `json:"server_cores"`
	ToolCores           float64            `json:"tool_cores"`
	ChecksPerServerCore float64            `json:"checks_per_server_core,omitempty"`
	CPUNote             string             `json:"cpu_note,omitempty"`
	// Processes are the metered processes with their pids.
	Processes []ProcessCPU `json:"processes"`

	// ServerMS is how long the nodes took to decide the run's checks, from
	// their own quorate_check_duration_seconds histograms: the time inside
	// the servers, without the network, the run queues and the tool. Only
	// for quorate targets whose HTTP addresses are known.
	ServerMS *ServerLatency `json:"server_ms,omitempty"`
	// ServerNote says why ServerMS is missing, when it was asked for.
	ServerNote string `json:"server_note,omitempty"`

	// Throughput is what completed in each second of the measured time.
	Throughput []Tick `json:"throughput"`
	// LatencyCurve is the latency percentile curve that --plot draws.
	LatencyCurve []CurvePoint `json:"latency_curve"`
	Interrupted  bool         `json:"interrupted,omitempty"`
}

// ServerLatency summarizes a server-side histogram: each quantile is the
// upper bound of the histogram bucket that holds it, in milliseconds (-1:
// above the largest bucket).
type ServerLatency struct {
	Requests uint64  `json:"requests"` // Check requests the nodes answered (a request may carry many checks)
	P50LE    float64 `json:"p50_le"`
	P90LE    float64 `json:"p90_le"`
	P99LE    float64 `json:"p99_le"`
	P999LE   float64 `json:"p999_le"`
}

// fillServer stores what the nodes' histograms counted during the runs.
func (r *RunResult) fillServer(s serverSide, note string) {
	if s.err != nil {
		note = s.err.Error()
	}
	if note != "" {
		r.ServerNote = note
		return
	}
	if s.hist.Total() == 0 {
		return
	}
	le := func(q float64) float64 {
		v, _ := s.hist.Quantile(q)
		if math.IsInf(v, 1) {
			return -1
		}
		return v * 1e3
	}
	r.ServerMS = &ServerLatency{Requests: s.hist.Total(), P50LE: le(0.5), P90LE: le(0.9), P99LE: le(0.99), P999LE: le(0.999)}
}

// LatencyMS is a latency summary in milliseconds.
type LatencyMS struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// CurvePoint is one point of the latency percentile curve.
type CurvePoint struct {
	Percentile float64 `json:"percentile"`
	MS         float64 `json:"ms"`
}

// ProcessCPU is one metered process.
type ProcessCPU struct {
	Name  string  `json:"name"`
	PID   int     `json:"pid"`
	Cores float64 `json:"cores"`
	Error string  `json:"error,omitempty"`
}

// OpenLoopInfo says whether an open loop kept to its schedule.
type OpenLoopInfo struct {
	// Late is the requests sent more than 1ms after their scheduled time,
	// because every in-flight slot was busy or the tool was starved of CPU.
	// Their latency counts from the schedule all the same.
	Late       int64   `json:"late"`
	MaxLagMS   float64 `json:"max_lag_ms"`
	TargetRate float64 `json:"target_rate"`
}

// AllFailed reports whether the run sent requests and every one failed.
func (r *RunResult) AllFailed() bool {
	return r.Errors > 0 && r.Errors == r.Requests
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func latencyMS(s latency.Summary) LatencyMS {
	return LatencyMS{P50: ms(s.P50), P90: ms(s.P90), P99: ms(s.P99), P999: ms(s.P999), Max: ms(s.Max), Mean: ms(s.Mean)}
}

// Ratio compares quorate with a baseline: each field is quorate's value
// divided by the baseline's, so above 1 means quorate is higher (better for
// throughput, worse for latency). A field is 0 when either side is 0.
type Ratio struct {
	Baseline            string  `json:"baseline"`
	RequestsPerSec      float64 `json:"requests_per_sec"`
	ChecksPerSec        float64 `json:"checks_per_sec"`
	LatencyP50          float64 `json:"latency_p50"`
	LatencyP90          float64 `json:"latency_p90"`
	LatencyP99          float64 `json:"latency_p99"`
	LatencyP999         float64 `json:"latency_p999"`
	ServerCores         float64 `json:"server_cores"`
	ChecksPerServerCore float64 `json:"checks_per_server_core"`
}

// NewRatio returns q relative to b.
func NewRatio(q, b *RunResult) *Ratio {
	div := func(x, y float64) float64 {
		if x == 0 || y == 0 {
			return 0
		}
		return x / y
	}
	return &Ratio{
		Baseline:            b.Target,
		RequestsPerSec:      div(q.RequestsPerSec, b.RequestsPerSec),
		ChecksPerSec:        div(q.ChecksPerSec, b.ChecksPerSec),
		LatencyP50:          div(q.LatencyMS.P50, b.LatencyMS.P50),
		LatencyP90:          div(q.LatencyMS.P90, b.LatencyMS.P90),
		LatencyP99:          div(q.LatencyMS.P99, b.LatencyMS.P99),
		LatencyP999:         div(q.LatencyMS.P999, b.LatencyMS.P999),
		ServerCores:         div(q.ServerCores, b.ServerCores),
		ChecksPerServerCore: div(q.ChecksPerServerCore, b.ChecksPerServerCore),
	}
}

// fillAccuracy accounts every recording (each has its own buckets) and
// stores the verdict in r.
func (r *RunResult) fillAccuracy(w Workload, recs []*Recording) {
	l, err := w.AccuracyLimit()
	if err != nil {
		r.AccuracyNote = "not computed: " + err.Error()
		return
	}
	var total accuracy.Report
	for _, rec := range recs {
		if rec.ArrivalsDropped {
			r.AccuracyNote = "not computed: more checks than the accountant keeps; shorten the run"
			return
		}
		rep, err := accuracy.Account(l, rec.Arrivals)
		if err != nil {
			r.AccuracyNote = "not computed: " + err.Error()
			return
		}
		total.Add(rep)
		rec.Arrivals = nil // done with them; they can be large
	}
	r.Admitted, r.AllowedByLimit = total.Admitted, total.AllowedByLimit
	r.OverAdmitted, r.UnderAdmitted = total.OverAdmitted, total.UnderAdmitted
	r.AdmissionRatio = total.Ratio()
	if w.Limit.Algorithm == "gcra" || w.Limit.Algorithm == "leaky_bucket_shaping" {
		r.AccuracyNote = "reference is a token bucket; " + w.Limit.Algorithm + " rounds its interval up, which may under-admit by up to 0.1%"
	}
}

// Label is how reports name the run's target: "quorate strict (unary)",
// "redis lua".
func (r *RunResult) Label() string { return label(r.Target, r.Mode, r.API) }
