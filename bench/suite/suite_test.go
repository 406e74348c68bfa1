package suite

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/bench"
)

func TestStandardScenariosAreValid(t *testing.T) {
	names := map[string]bool{}
	for _, s := range Standard(0) {
		if names[s.Name] {
			t.Errorf("duplicate scenario %s", s.Name)
		}
		names[s.Name] = true
		if err := s.Workload.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if err := s.Load.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if s.Load.Duration != StandardDuration || s.Description == "" {
			t.Errorf("%s: duration %v, description %q", s.Name, s.Load.Duration, s.Description)
		}
		if s.RateFrom != "" && !names[s.RateFrom] {
			t.Errorf("%s: takes its rate from %s, which does not run before it", s.Name, s.RateFrom)
		}
	}
	// The issue asks for strict and leased, unary and batched.
	for _, n := range []string{"strict-unary", "strict-batch10", "leased-unary", "leased-batch10"} {
		if !names[n] {
			t.Errorf("no scenario %s", n)
		}
	}
	if got := Standard(time.Second)[0].Load.Duration; got != time.Second {
		t.Errorf("duration override: %v", got)
	}
}

// driver answers every check allowed, or fails every request with err.
type driver struct{ err error }

func (d driver) Check(_ context.Context, items []bench.Item, out []bench.Outcome) error {
	if d.err != nil {
		return d.err
	}
	for i := range items {
		out[i] = bench.Outcome{Allowed: true, Reason: bench.ReasonWithinLimit, DecidedAt: time.Now().UnixNano()}
	}
	return nil
}

func (driver) Close() error { return nil }

func TestRunnerPreflightRateFromAndBaseline(t *testing.T) {
	w := bench.Workload{Distribution: bench.Uniform, Keys: 10, Items: 1, Cost: 1,
		Limit: bench.Limit{Algorithm: "token_bucket", Limit: 1000, Period: time.Second}}
	scenarios := []Scenario{
		{Name: "a", Mode: "strict", Workload: w, Load: bench.Load{Concurrency: 2, Requests: 50}},
		{Name: "b", Mode: "leased", Workload: w, Load: bench.Load{Concurrency: 2, Requests: 50}},
		{Name: "c", Mode: "strict", Workload: w, Load: bench.Load{Concurrency: 2, Rate: 7, Duration: 300 * time.Millisecond},
			RateFrom: "a", RateFraction: 1e-9},
		{Name: "d", Mode: "strict", Workload: bench.Workload{Distribution: bench.Uniform, Keys: 10, Items: 1, Cost: 1,
			Limit: bench.Limit{Algorithm: "gcra", Limit: 1000, Period: time.Second}}, Load: bench.Load{Concurrency: 1, Requests: 5}},
	}
	r := &Runner{
		Quorate: func(mode string) (*bench.Target, error) {
			d := driver{}
			if mode == "leased" {
				d.err = status.Error(codes.Unimplemented, "not yet")
			}
			return &bench.Target{Name: "quorate", Mode: mode, Driver: d}, nil
		},
		Baselines: []func(Scenario) (*bench.Target, error){func(s Scenario) (*bench.Target, error) {
			if s.Workload.Limit.Algorithm != "token_bucket" {
				return nil, errors.New("wrapped: " + ErrUnsupported.Error())
			}
			return &bench.Target{Name: "redis", Mode: "lua", Driver: driver{}}, nil
		}},
		Preflight: true,
	}
	// A baseline error that is not ErrUnsupported stops the suite.
	comps, err := r.Run(context.Background(), scenarios)
	if err == nil || len(comps) != 3 {
		t.Fatalf("got %d comparisons, err %v; want 3 and the baseline's error", len(comps), err)
	}
	r.Baselines = []func(Scenario) (*bench.Target, error){
		func(s Scenario) (*bench.Target, error) {
			if s.Workload.Limit.Algorithm != "token_bucket" {
				return nil, errors.Join(ErrUnsupported, errors.New("no gcra script"))
			}
			return &bench.Target{Name: "redis", Mode: "lua", Driver: driver{}}, nil
		},
		func(Scenario) (*bench.Target, error) {
			return &bench.Target{Name: "noop", Mode: "allow", API: "unary", Driver: driver{}, NoAccuracy: "it allows everything"}, nil
		},
	}
	comps, err = r.Run(context.Background(), scenarios)
	if err != nil {
		t.Fatal(err)
	}
	if c := comps[0]; len(c.Runs) != 3 || len(c.Ratios) != 2 || c.Ratio != c.Ratios[0] ||
		c.Ratios[0].Baseline != "redis" || c.Ratios[1].Baseline != "noop" {
		t.Errorf("a: %d runs, ratios %v; want quorate, redis and noop, with a ratio to each (the first also as ratio)", len(c.Runs), c.Ratios)
	}
	if noop := comps[0].Runs[2]; noop.Label() != "noop allow (unary)" || !strings.Contains(noop.AccuracyNote, "not computed: it allows everything") || noop.AllowedByLimit != 0 {
		t.Errorf("noop run: label %q, accuracy note %q, allowed by limit %d", noop.Label(), noop.AccuracyNote, noop.AllowedByLimit)
	}
	if !strings.Contains(comps[1].Skipped, "UNIMPLEMENTED: not yet") || comps[1].Runs != nil {
		t.Errorf("b: skipped %q; want the preflight's UNIMPLEMENTED", comps[1].Skipped)
	}
	// c's rate comes from a's throughput (times a tiny fraction: at least 1).
	if rate := comps[2].Runs[0].Rate; rate != 1 {
		t.Errorf("c: rate %v; want 1 (derived from a), not the fallback 7", rate)
	}
	if !strings.Contains(comps[2].Description, "open loop at 1 req/s") {
		t.Errorf("c: description %q", comps[2].Description)
	}
	if c := comps[3]; len(c.Runs) != 2 || c.Runs[1].Target != "noop" || c.Ratio.Baseline != "noop" || !strings.Contains(c.Description, "no baseline: ") {
		t.Errorf("d: %d runs, description %q; want quorate and noop, saying why not redis", len(c.Runs), c.Description)
	}
}
