package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/quorate/quorate/bench/latency"
	"github.com/quorate/quorate/bench/proccpu"
	"github.com/quorate/quorate/bench/srvlat"
)

// Target is one system under test.
type Target struct {
	// Name is "quorate" or the baseline's name ("redis").
	Name string
	// Mode is quorate's mode (strict, leased), or the baseline's ("lua",
	// "allow").
	Mode string
	// API is how checks reach a RateLimiter server: "unary" (one Check
	// call each) or "stream" (CheckStream); "" for targets of another
	// protocol (Redis).
	API    string
	Addrs  []string
	Driver Driver
	// Procs are the target's server processes, metered during each run.
	Procs []proccpu.Process
	// CPUNote says why Procs is empty or incomplete, for the report.
	CPUNote string
	// Metrics are the HTTP addresses of the quorate nodes in Addrs. When
	// set, each measured run also reports how long the nodes themselves
	// took to decide its checks (package srvlat).
	Metrics []string
	// MetricsNote says why Metrics is empty, for the report.
	MetricsNote string
	// MetricsToken is the bearer token (read scope) /metrics asks for.
	MetricsToken string
	// NoAccuracy, if set, says why admission accuracy means nothing for
	// this target (the noop baseline allows everything); it is then not
	// computed.
	NoAccuracy string
}

// Label is how reports name the target: "quorate strict (unary)",
// "noop allow (stream)", "redis lua".
func (t *Target) Label() string { return label(t.Name, t.Mode, t.API) }

func label(name, mode, api string) string {
	if api == "" {
		return name + " " + mode
	}
	return name + " " + mode + " (" + api + ")"
}

// Plan is one scenario: a workload and a load, run against each target.
type Plan struct {
	Scenario string
	Workload Workload
	// Load is each target's load in total: with several rounds, each round
	// gets an equal share of its duration and requests.
	Load Load
	Seed uint64
	// Rounds is how many times the targets take turns (at least 1). Round
	// r runs the targets in order when r is odd and in reverse when it is
	// even (A B, B A, ...), so that slow drift of the machine (heat, other
	// load) weighs on every target alike.
	Rounds int
	// Warmup is sent to each target before each measured round, to buckets
	// of its own, and not measured: it opens connections and fills pools.
	Warmup      time.Duration
	MaxArrivals int64
}

// Hooks let a caller watch a plan's progress.
type Hooks struct {
	// BeforeRun is called before each measured run, with the run's live
	// totals; the function it returns is called when the run is over.
	BeforeRun func(t *Target, round, rounds int, load Load, live *Live) (after func())
}

// Execute runs plan against every target, round after round, and returns
// one result per target in the order given. Cancelling ctx stops it early;
// the results then hold what was measured and say Interrupted.
func Execute(ctx context.Context, plan Plan, targets []*Target, hooks Hooks) ([]*RunResult, error) {
	if err := plan.Workload.Validate(); err != nil {
		return nil, fmt.Errorf("bench: workload: %w", err)
	}
	if err := plan.Load.Validate(); err != nil {
		return nil, fmt.Errorf("bench: load: %w", err)
	}
	rounds := max(plan.Rounds, 1)
	load := plan.Load.split(rounds)
	// A namespace per invocation, target and round: every measured run
	// starts with fresh buckets even against a long-lived cluster.
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	self := proccpu.Process{Name: "tool", PID: os.Getpid()}

	type acc struct {
		recs  []*Recording
		usage map[string]*proccpu.Usage
		order []string
		srv   serverSide
	}
	accs := make([]*acc, len(targets))
	for i := range accs {
		accs[i] = &acc{usage: map[string]*proccpu.Usage{}}
	}
	for round := 1; round <= rounds && ctx.Err() == nil; round++ {
		for j := range targets {
			i := j
			if round%2 == 0 {
				i = len(targets) - 1 - j
			}
			t := targets[i]
			ns := fmt.Sprintf("bench-%s-%s-%s-r%d", runID, t.Name, t.Mode, round)
			if plan.Warmup > 0 {
				wl := Load{Concurrency: load.Concurrency, Rate: load.Rate, Duration: plan.Warmup, Timeout: load.Timeout}
				// Nothing of the warmup is kept: one arrival of room makes
				// the recorder drop the rest at once.
				if _, err := Run(ctx, t.Driver, RunSpec{Workload: plan.Workload, Load: wl, Namespace: ns + "-warmup", Seed: plan.Seed + 1, MaxArrivals: 1}); err != nil {
					return nil, err
				}
			}
			if ctx.Err() != nil {
				break
			}
			live := &Live{}
			var after func()
			if hooks.BeforeRun != nil {
				after = hooks.BeforeRun(t, round, rounds, load, live)
			}
			a := accs[i]
			srvBefore := a.srv.scrape(ctx, t)
			meter := proccpu.Start(append([]proccpu.Process{self}, t.Procs...))
			rec, err := Run(ctx, t.Driver, RunSpec{
				Workload: plan.Workload, Load: load, Namespace: ns, Seed: plan.Seed,
				Live: live, MaxArrivals: plan.MaxArrivals,
			})
			usage := meter.Stop()
			a.srv.add(a.srv.scrape(ctx, t), srvBefore)
			if after != nil {
				after()
			}
			if err != nil {
				return nil, err
			}
			a.recs = append(a.recs, rec)
			for _, u := range usage {
				sum, ok := a.usage[u.Name]
				if !ok {
					sum = &proccpu.Usage{Process: u.Process}
					a.usage[u.Name] = sum
					a.order = append(a.order, u.Name)
				}
				sum.CPU += u.CPU
				sum.Wall += u.Wall
				if u.Err != nil {
					sum.Err = u.Err
				}
			}
		}
	}
	out := make([]*RunResult, len(targets))
	for i, t := range targets {
		var usage []proccpu.Usage
		for _, name := range accs[i].order {
			usage = append(usage, *accs[i].usage[name])
		}
		out[i] = result(plan, t, rounds, accs[i].recs, usage)
		out[i].fillServer(accs[i].srv, t.MetricsNote)
	}
	return out, nil
}

// result merges a target's recordings (one per round) into its RunResult.
func result(plan Plan, t *Target, rounds int, recs []*Recording, usage []proccpu.Usage) *RunResult {
	w, l := plan.Workload, plan.Load
	r := &RunResult{
		Scenario: plan.Scenario, Target: t.Name, Mode: t.Mode, API: t.API, Addrs: t.Addrs,
		Workload: w.Describe(), Load: l.Describe(),
		Distribution: string(w.Distribution), Keys: w.Keys, Items: w.Items, Cost: w.Cost,
		Algorithm: w.Limit.Algorithm, Limit: w.Limit.Limit, PeriodS: w.Limit.Period.Seconds(), Burst: w.Limit.Burst,
		Concurrency: l.Concurrency, Rate: l.Rate, Seed: plan.Seed, Rounds: rounds,
		ErrorsByCode: map[string]int64{}, Reasons: map[string]int64{}, CPUCores: map[string]float64{},
		Throughput: []Tick{},
	}
	lat, svc := latency.New(), latency.New()
	var elapsed time.Duration
	var late int64
	var maxLag time.Duration
	for _, rec := range recs {
		elapsed += rec.Elapsed
		r.Requests += rec.Requests
		r.Checks += rec.Checks
		r.AllowedRequests += rec.AllowedRequests
		for c, n := range rec.Errors {
			r.ErrorsByCode[c] += n
			r.Errors += n
			if _, ok := r.ErrorExamples[c]; !ok {
				if r.ErrorExamples == nil {
					r.ErrorExamples = map[string]string{}
				}
				r.ErrorExamples[c] = rec.FirstErrors[c]
			}
		}
		for i, n := range rec.Reasons {
			if n > 0 {
				r.Reasons[Reason(i).String()] += n
			}
		}
		lat.Merge(rec.Latency)
		svc.Merge(rec.Service)
		for i, tick := range rec.Series {
			tick.Seconds = min(1, (rec.Elapsed - time.Duration(i)*time.Second).Seconds())
			r.Throughput = append(r.Throughput, tick)
		}
		late += rec.Late
		maxLag = max(maxLag, rec.MaxLag)
		r.Interrupted = r.Interrupted || rec.Interrupted
	}
	r.DurationS = elapsed.Seconds()
	if elapsed > 0 {
		r.RequestsPerSec = float64(r.Requests) / elapsed.Seconds()
		r.ChecksPerSec = float64(r.Checks) / elapsed.Seconds()
	}
	r.LatencyMS = latencyMS(lat.Summary())
	for _, p := range lat.Curve(10) {
		r.LatencyCurve = append(r.LatencyCurve, CurvePoint{Percentile: p.Percentile, MS: ms(p.Latency)})
	}
	if l.Open() {
		s := latencyMS(svc.Summary())
		r.ServiceMS = &s
		r.OpenLoop = &OpenLoopInfo{Late: late, MaxLagMS: ms(maxLag), TargetRate: l.Rate}
	}
	if t.NoAccuracy != "" {
		r.AccuracyNote = "not computed: " + t.NoAccuracy
	} else {
		r.fillAccuracy(w, recs)
	}
	if t.Mode == "leased" && r.OverAdmitted > 0 && r.AccuracyNote == "" {
		r.AccuracyNote = "leased checks are timed when their lease is spent, not when the grant charged the bucket, so a check or two per bucket can read as over-admission (see bench/results/README.md)"
	}
	r.fillCPU(t, usage)
	return r
}

// fillCPU stores the cores each process used.
func (r *RunResult) fillCPU(t *Target, usage []proccpu.Usage) {
	r.CPUNote = t.CPUNote
	var missing []string
	for _, u := range usage {
		if u.Err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", u.Name, u.Err))
			r.Processes = append(r.Processes, ProcessCPU{Name: u.Name, PID: u.PID, Error: u.Err.Error()})
			continue
		}
		r.Processes = append(r.Processes, ProcessCPU{Name: u.Name, PID: u.PID, Cores: u.Cores()})
		c := u.Cores()
		r.CPUCores[u.Name] = c
		if u.Name == "tool" {
			r.ToolCores = c
		} else {
			r.ServerCores += c
		}
	}
	if len(missing) > 0 {
		note := fmt.Sprintf("not metered: %v", missing)
		if r.CPUNote != "" {
			note = r.CPUNote + "; " + note
		}
		r.CPUNote = note
	}
	if r.ServerCores > 0 {
		r.ChecksPerServerCore = r.ChecksPerSec / r.ServerCores
	}
}

// serverSide sums, over a target's rounds, what its nodes' own histograms
// counted during each measured run.
type serverSide struct {
	hist srvlat.Hist
	err  error
}

// scrape reads t's nodes' histogram of t's mode; nil when t has no metrics
// addresses or an earlier scrape failed.
func (s *serverSide) scrape(ctx context.Context, t *Target) *srvlat.Hist {
	if len(t.Metrics) == 0 || s.err != nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	hc := http.DefaultClient
	if t.MetricsToken != "" {
		hc = &http.Client{Transport: bearerTransport(t.MetricsToken)}
	}
	h, err := srvlat.Scrape(sctx, hc, t.Metrics, t.Mode)
	if err != nil {
		s.err = err
		return nil
	}
	return &h
}

// add counts one run: after less before.
func (s *serverSide) add(after, before *srvlat.Hist) {
	if after == nil || before == nil {
		return
	}
	s.hist = s.hist.Add(after.Sub(*before))
}

// bearerTransport sends its token on every request.
type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
