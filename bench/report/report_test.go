package report

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorate/quorate/bench"
)

func sampleRuns() *bench.Comparison {
	q := &bench.RunResult{
		Scenario: "strict-unary", Target: "quorate", Mode: "strict",
		DurationS: 5, Requests: 1000, Checks: 1000, RequestsPerSec: 200, ChecksPerSec: 200,
		LatencyMS: bench.LatencyMS{P50: 2.5, P90: 4, P99: 12.25, P999: 40, Max: 51},
		Admitted:  990, AllowedByLimit: 1000, UnderAdmitted: 10,
		ServerCores: 1.2, ToolCores: 0.1, ChecksPerServerCore: 166.7,
		CPUCores:      map[string]float64{"n1": 0.4, "n2": 0.4, "n3": 0.4, "tool": 0.1},
		Errors:        3,
		ErrorsByCode:  map[string]int64{"UNAVAILABLE": 3},
		ErrorExamples: map[string]string{"UNAVAILABLE": "connection refused"},
		Throughput:    []bench.Tick{{Requests: 190, Checks: 190, Seconds: 1}, {Requests: 210, Checks: 210, Seconds: 1}},
		LatencyCurve:  []bench.CurvePoint{{Percentile: 0, MS: 1}, {Percentile: 90, MS: 4}, {Percentile: 99, MS: 12}, {Percentile: 100, MS: 51}},
	}
	r := &bench.RunResult{
		Scenario: "strict-unary", Target: "redis", Mode: "lua",
		DurationS: 5, Requests: 5000, Checks: 5000, RequestsPerSec: 1000, ChecksPerSec: 1000,
		LatencyMS: bench.LatencyMS{P50: 0.25, P90: 0.5, P99: 1, P999: 2, Max: 3},
		Admitted:  5000, AllowedByLimit: 5000,
		ServerCores: 0.3, ToolCores: 0.4, ChecksPerServerCore: 3333,
		CPUCores:     map[string]float64{"redis-server:7": 0.3, "tool": 0.4},
		Throughput:   []bench.Tick{{Requests: 1000, Checks: 1000, Seconds: 1}},
		LatencyCurve: []bench.CurvePoint{{Percentile: 0, MS: 0.1}, {Percentile: 100, MS: 3}},
	}
	return &bench.Comparison{Scenario: "strict-unary", Runs: []*bench.RunResult{q, r}, Ratio: bench.NewRatio(q, r)}
}

func TestTable(t *testing.T) {
	var b strings.Builder
	skipped := &bench.Comparison{Scenario: "leased-unary", Skipped: "the server does not implement mode leased yet (UNIMPLEMENTED: nope)"}
	if err := Table(&b, []*bench.Comparison{sampleRuns(), skipped}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	for _, want := range []string{
		"SCENARIO", "CHECKS/S/SRV-CORE",
		"quorate strict", "redis lua", "ratio quorate/redis",
		"0.20x",  // checks/s 200/1000
		"10.00x", // p50 2.5/0.25
		"12.2",   // p99 12.25 with three significant digits
		"leased-unary  skipped",
		"leased-unary: skipped: the server does not implement mode leased yet",
		"strict-unary, quorate strict: 3× UNAVAILABLE: connection refused",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Every row of the table proper is as wide as its columns: numbers
	// right-aligned under their header.
	header := lines[0]
	col := strings.Index(header, "CHECKS/S ") + len("CHECKS/S")
	for _, l := range lines[1:3] {
		if len(l) < col || l[col-1] == ' ' {
			t.Errorf("CHECKS/S not right-aligned at column %d:\n%s\n%s", col, header, l)
		}
	}
}

// With two baselines, each gets its ratio row, and targets speaking the
// RateLimiter API say which call they used.
func TestTableTwoBaselines(t *testing.T) {
	c := sampleRuns()
	q, r := c.Runs[0], c.Runs[1]
	q.API = "stream"
	n := &bench.RunResult{Scenario: "strict-unary", Target: "noop", Mode: "allow", API: "stream",
		RequestsPerSec: 400, ChecksPerSec: 400, LatencyMS: bench.LatencyMS{P50: 0.5, P90: 1, P99: 2, P999: 4, Max: 5},
		AccuracyNote: "not computed: it allows everything", CPUCores: map[string]float64{}}
	c.Runs = append(c.Runs, n)
	c.Ratios = []*bench.Ratio{bench.NewRatio(q, r), bench.NewRatio(q, n)}
	c.Ratio = c.Ratios[0]
	var b strings.Builder
	if err := Table(&b, []*bench.Comparison{c}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"quorate strict (stream)", "redis lua ", "noop allow (stream)",
		"ratio quorate/redis", "ratio quorate/noop", "0.50x", // checks/s 200/400
		"strict-unary, noop allow (stream): accuracy not computed: it allows everything",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "ratio quorate/redis") > strings.Index(out, "ratio quorate/noop") {
		t.Errorf("ratio rows not in the order of the baselines:\n%s", out)
	}
}

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	c := sampleRuns()
	if err := WriteJSON(path, c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	runs := m["runs"].([]any)
	first := runs[0].(map[string]any)
	// The contract: these names, for scripts.
	for _, k := range []string{"target", "mode", "duration_s", "requests", "checks", "checks_per_sec", "errors",
		"latency_ms", "admitted", "allowed_by_limit", "over_admitted", "under_admitted", "cpu_cores"} {
		if _, ok := first[k]; !ok {
			t.Errorf("run JSON lacks %q", k)
		}
	}
	lat := first["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_ms lacks %q", k)
		}
	}
	if r := m["ratio"].(map[string]any); r["checks_per_sec"].(float64) != 0.2 {
		t.Errorf("ratio %v", r)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".report-*")); len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestPlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	if err := Plot(path, sampleRuns()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 400 {
		t.Errorf("plot is %v", b)
	}
}
