// Package suite runs quorate bench's scenarios against their targets: the
// one scenario a command line describes, or the standard suite that
// "make bench" runs and whose report the project quotes. For each scenario
// it makes the quorate target of the scenario's mode and the baselines, if
// any, runs them in alternating rounds (bench.Execute), and computes the
// ratio quorate/baseline for each baseline.
package suite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/quorate/quorate/bench"
)

// Scenario is one named workload and load against quorate in one mode.
type Scenario struct {
	Name        string
	Description string
	Mode        string // strict or leased
	Workload    bench.Workload
	Load        bench.Load
	// RateFrom, if set, makes the scenario an open loop at RateFraction of
	// the request rate quorate reached in the scenario of that name (run
	// earlier in the same suite): latency at a known fraction of capacity
	// means the same thing whatever the machine. Load.Rate is the fallback
	// when that scenario has no result.
	RateFrom     string
	RateFraction float64
}

// Runner runs scenarios.
type Runner struct {
	// Quorate returns the quorate target in mode; Run closes its driver
	// after the scenario.
	Quorate func(mode string) (*bench.Target, error)
	// Baselines return the baseline targets for a scenario, in the order
	// of the report (the pool size of a driver may depend on the load). A
	// baseline that cannot run the workload returns an error wrapping
	// ErrUnsupported: the scenario then runs without it and says why.
	Baselines []func(s Scenario) (*bench.Target, error)
	Rounds    int
	Warmup    time.Duration
	Seed      uint64
	// Preflight sends one request to quorate before each scenario and
	// skips the scenario if the server does not implement its mode
	// (UNIMPLEMENTED), instead of measuring a run of errors. The standard
	// suite uses it; a single run does not, so that its errors are counted
	// and reported.
	Preflight bool
	Hooks     bench.Hooks
	// Logf reports what the runner does (may be nil).
	Logf func(format string, args ...any)
}

// ErrUnsupported marks a workload the baseline cannot run.
var ErrUnsupported = errors.New("suite: baseline does not support this workload")

// Run runs every scenario in order. It stops at the first error that is
// not about a scenario's results (a target that cannot be set up) or when
// ctx is cancelled, returning what it has so far.
func (r *Runner) Run(ctx context.Context, scenarios []Scenario) ([]*bench.Comparison, error) {
	var out []*bench.Comparison
	quorate := map[string]*bench.RunResult{} // scenario → quorate's result
	for _, s := range scenarios {
		if ctx.Err() != nil {
			break
		}
		if s.RateFrom != "" {
			if q, ok := quorate[s.RateFrom]; ok && q.RequestsPerSec > 0 && !q.AllFailed() {
				s.Load.Rate = max(1, math.Round(s.RateFraction*q.RequestsPerSec))
			}
			s.Description += fmt.Sprintf(" (open loop at %g req/s: %g × %s's throughput)", s.Load.Rate, s.RateFraction, s.RateFrom)
		}
		c, err := r.runOne(ctx, s)
		if c != nil && len(c.Runs) > 0 {
			quorate[s.Name] = c.Runs[0]
		}
		if c != nil {
			out = append(out, c)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (r *Runner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

func (r *Runner) runOne(ctx context.Context, s Scenario) (*bench.Comparison, error) {
	c := &bench.Comparison{Scenario: s.Name, Description: s.Description}
	q, err := r.Quorate(s.Mode)
	if err != nil {
		return nil, err
	}
	defer q.Driver.Close()
	if r.Preflight {
		if why := preflight(ctx, q, s.Workload); why != "" {
			c.Skipped = why
			r.logf("%s: skipped: %s\n", s.Name, why)
			return c, nil
		}
	}
	targets := []*bench.Target{q}
	var baselineNotes []string
	for _, baseline := range r.Baselines {
		b, err := baseline(s)
		switch {
		case errors.Is(err, ErrUnsupported):
			baselineNotes = append(baselineNotes, err.Error())
			r.logf("%s: without a baseline: %v\n", s.Name, err)
		case err != nil:
			return nil, err
		default:
			defer b.Driver.Close()
			targets = append(targets, b)
		}
	}
	r.logf("%s: %s; %s\n", s.Name, s.Workload.Describe(), s.Load.Describe())
	runs, err := bench.Execute(ctx, bench.Plan{
		Scenario: s.Name, Workload: s.Workload, Load: s.Load, Seed: r.Seed,
		Rounds: r.Rounds, Warmup: r.Warmup,
	}, targets, r.Hooks)
	if err != nil {
		return nil, err
	}
	c.Runs = runs
	for _, b := range runs[1:] {
		c.Ratios = append(c.Ratios, bench.NewRatio(runs[0], b))
	}
	if len(c.Ratios) > 0 {
		c.Ratio = c.Ratios[0]
	}
	for _, note := range baselineNotes {
		c.Description += " (no baseline: " + note + ")"
	}
	return c, nil
}

// preflight sends one single-item request to t and returns why the
// scenario cannot run, or "" if it can (any other failure is left for the
// run itself to count).
func preflight(ctx context.Context, t *bench.Target, w bench.Workload) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.Items = 1
	gen := w.NewGenerator(fmt.Sprintf("bench-preflight-%d", time.Now().UnixNano()), 1)
	items, buckets, out := make([]bench.Item, 1), make([]uint64, 1), make([]bench.Outcome, 1)
	gen.Next(items, buckets)
	err := t.Driver.Check(ctx, items, out)
	if err != nil && bench.ErrorCode(err) == "UNIMPLEMENTED" {
		return fmt.Sprintf("the server does not implement mode %s yet (UNIMPLEMENTED: %s)", t.Mode, bench.ErrorMessage(err))
	}
	return ""
}

// Report is a suite's JSON output.
type Report struct {
	Suite     string              `json:"suite"`
	StartedAt time.Time           `json:"started_at"`
	Version   string              `json:"version"`
	Machine   Machine             `json:"machine"`
	Target    string              `json:"target"` // "local cluster of 3 nodes", or the addresses
	Scenarios []*bench.Comparison `json:"scenarios"`
}

// Machine describes where the suite ran: results are only comparable on
// the same machine.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// ThisMachine describes the machine the tool runs on.
func ThisMachine() Machine {
	return Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}
