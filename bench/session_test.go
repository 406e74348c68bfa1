package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/bench/proccpu"
)

// orderLog records the order in which targets were measured.
type orderLog struct {
	mu    sync.Mutex
	order []string
}

func (o *orderLog) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.order = append(o.order, s)
}

func TestExecuteAlternatesRoundsWithFreshBuckets(t *testing.T) {
	// A limiter that admits the first 5 checks of each bucket and denies
	// the rest: with capacity 5 and a period far longer than the run, that
	// is exact, so the accountant must find no error however many rounds.
	type bucketKey struct{ name, key string }
	var mu sync.Mutex
	seen := map[bucketKey]int{}
	allow := func(it Item) bool {
		mu.Lock()
		defer mu.Unlock()
		k := bucketKey{it.Name, it.Key}
		seen[k]++
		return seen[k] <= 5
	}
	a := &fakeDriver{clk: SystemClock{}, allow: allow}
	b := &fakeDriver{clk: SystemClock{}, allow: allow}
	log := &orderLog{}
	targets := []*Target{
		{Name: "quorate", Mode: "strict", Driver: a, Procs: []proccpu.Process{{Name: "me-too", PID: -1}}},
		{Name: "redis", Mode: "lua", Driver: b},
	}
	w := testWorkload()
	w.Distribution, w.Limit = Hot, Limit{Algorithm: "token_bucket", Limit: 5, Period: time.Hour}
	plan := Plan{Scenario: "s", Workload: w, Load: Load{Concurrency: 2, Requests: 40}, Rounds: 4, Warmup: 20 * time.Millisecond}
	runs, err := Execute(context.Background(), plan, targets, Hooks{
		BeforeRun: func(t *Target, round, rounds int, load Load, live *Live) func() {
			log.add(t.Name)
			return func() {
				if r, _, _ := live.Snapshot(); r != load.Requests {
					log.add("live-mismatch")
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log.order, " "); got != "quorate redis redis quorate quorate redis redis quorate" {
		t.Errorf("order %q; want A B B A A B B A", got)
	}
	for i, r := range runs {
		if r.Target != targets[i].Name || r.Rounds != 4 {
			t.Errorf("run %d is %s with %d rounds", i, r.Target, r.Rounds)
		}
		// 40 requests split over 4 rounds.
		if r.Requests != 40 || r.Checks != 40 {
			t.Errorf("%s: %d requests; want 40", r.Target, r.Requests)
		}
		// Each round has its own hot bucket, which admits 5 of its 10.
		if r.Admitted != 4*5 || r.AllowedByLimit != 4*5 || r.OverAdmitted != 0 || r.UnderAdmitted != 0 {
			t.Errorf("%s: admitted %d allowed %d over %d under %d; want 20/20/0/0", r.Target, r.Admitted, r.AllowedByLimit, r.OverAdmitted, r.UnderAdmitted)
		}
		if r.Reasons["WITHIN_LIMIT"] != 20 || r.Reasons["OVER_LIMIT"] != 20 {
			t.Errorf("%s: reasons %v; want 20 within, 20 over", r.Target, r.Reasons)
		}
		if _, ok := r.CPUCores["tool"]; !ok {
			t.Errorf("%s: no CPU for the tool: %v", r.Target, r.CPUCores)
		}
	}
	if !strings.Contains(runs[0].CPUNote, "me-too") {
		t.Errorf("a process that cannot be metered must be named: note %q", runs[0].CPUNote)
	}
	// Warmups and rounds each used their own namespace: names seen by the
	// first driver are distinct per round, and none is shared with the
	// other target.
	names := map[string]bool{}
	for _, c := range a.calls {
		names[c.items[0].Name] = true
	}
	if len(names) != 8 { // 4 rounds + 4 warmups
		t.Errorf("quorate saw %d namespaces; want 8: %v", len(names), names)
	}
	for _, c := range b.calls {
		if names[c.items[0].Name] {
			t.Fatalf("namespace %s used by both targets", c.items[0].Name)
		}
	}
	ratio := NewRatio(runs[0], runs[1])
	if ratio.Baseline != "redis" || ratio.ChecksPerSec <= 0 {
		t.Errorf("ratio %+v", ratio)
	}
}

func TestNewRatio(t *testing.T) {
	q := &RunResult{Target: "quorate", ChecksPerSec: 300, RequestsPerSec: 30, LatencyMS: LatencyMS{P50: 2, P99: 10}, ServerCores: 1.5, ChecksPerServerCore: 200}
	b := &RunResult{Target: "redis", ChecksPerSec: 600, RequestsPerSec: 60, LatencyMS: LatencyMS{P50: 1, P99: 5}, ServerCores: 0.5, ChecksPerServerCore: 1200}
	r := NewRatio(q, b)
	if r.ChecksPerSec != 0.5 || r.RequestsPerSec != 0.5 || r.LatencyP50 != 2 || r.LatencyP99 != 2 || r.ServerCores != 3 || r.ChecksPerServerCore != 200.0/1200 {
		t.Errorf("ratio %+v", r)
	}
	if r.LatencyP90 != 0 {
		t.Errorf("a ratio with a zero side must be 0 (n/a), got %v", r.LatencyP90)
	}
}
