// Package report presents quorate bench's results: the human table, the
// JSON for machines, and the PNG plot (latency percentile curve and
// throughput over time) for people. It only formats; the numbers are
// computed in package bench.
package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/quorate/quorate/bench"
)

// Table writes comps as one table: a row per target per scenario, a ratio
// row per baseline under each scenario that ran baselines, and, below the table, what
// every failed request said, one line per error code.
func Table(w io.Writer, comps []*bench.Comparison) error {
	rows := [][]string{{"SCENARIO", "TARGET", "REQ/S", "CHECKS/S", "P50ms", "P90ms", "P99ms", "P99.9ms", "MAXms",
		"ERRORS", "ADMITTED", "ALLOWED", "OVER", "UNDER", "SRV-CORES", "TOOL-CORES", "CHECKS/S/SRV-CORE"}}
	var notes []string
	for _, c := range comps {
		if c.Skipped != "" {
			rows = append(rows, []string{c.Scenario, "skipped"})
			notes = append(notes, fmt.Sprintf("%s: skipped: %s", c.Scenario, c.Skipped))
			continue
		}
		for i, r := range c.Runs {
			name := ""
			if i == 0 {
				name = c.Scenario
			}
			rows = append(rows, runRow(name, r))
			notes = append(notes, runNotes(c.Scenario, r)...)
		}
		ratios := c.Ratios
		if len(ratios) == 0 && c.Ratio != nil {
			ratios = []*bench.Ratio{c.Ratio}
		}
		for _, q := range ratios {
			rows = append(rows, []string{"", "ratio quorate/" + q.Baseline, ratio(q.RequestsPerSec), ratio(q.ChecksPerSec),
				ratio(q.LatencyP50), ratio(q.LatencyP90), ratio(q.LatencyP99), ratio(q.LatencyP999), "",
				"", "", "", "", "", ratio(q.ServerCores), "", ratio(q.ChecksPerServerCore)})
		}
	}
	var b strings.Builder
	grid(&b, rows, 2)
	for _, n := range notes {
		b.WriteString(n)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// grid lays rows out in columns two spaces apart: the first left columns
// aligned left (names), the others right (numbers).
func grid(b *strings.Builder, rows [][]string, left int) {
	var width []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if i < left {
				line.WriteString(cell + pad)
			} else {
				line.WriteString(pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}

func runRow(scenario string, r *bench.RunResult) []string {
	l := r.LatencyMS
	row := []string{scenario, r.Label(),
		count(r.RequestsPerSec), count(r.ChecksPerSec),
		millis(l.P50), millis(l.P90), millis(l.P99), millis(l.P999), millis(l.Max),
		fmt.Sprint(r.Errors)}
	if r.AccuracyNote != "" && r.AllowedByLimit == 0 && r.Admitted == 0 {
		row = append(row, "n/a", "n/a", "n/a", "n/a")
	} else {
		row = append(row, fmt.Sprint(r.Admitted), fmt.Sprint(r.AllowedByLimit), fmt.Sprint(r.OverAdmitted), fmt.Sprint(r.UnderAdmitted))
	}
	srv, perCore := "n/a", "n/a"
	if r.ServerCores > 0 {
		srv, perCore = fmt.Sprintf("%.2f", r.ServerCores), count(r.ChecksPerServerCore)
	}
	return append(row, srv, fmt.Sprintf("%.2f", r.ToolCores), perCore)
}

// bound formats a histogram quantile's bucket bound in milliseconds.
func bound(ms float64) string {
	if ms < 0 {
		return "> largest bucket"
	}
	return "≤ " + strconv.FormatFloat(ms, 'g', 4, 64) + "ms"
}

// runNotes are the lines under the table about one run: its errors by code
// with the first message of each, and caveats about its numbers.
func runNotes(scenario string, r *bench.RunResult) []string {
	var out []string
	who := fmt.Sprintf("%s, %s", scenario, r.Label())
	codes := make([]string, 0, len(r.ErrorsByCode))
	for c := range r.ErrorsByCode {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		out = append(out, fmt.Sprintf("%s: %d× %s: %s", who, r.ErrorsByCode[c], c, r.ErrorExamples[c]))
	}
	if r.AllFailed() {
		out = append(out, fmt.Sprintf("%s: every request failed", who))
	}
	if n := r.Reasons[bench.ReasonUnavailable.String()] + r.Reasons[bench.ReasonFailOpen.String()]; n > 0 {
		out = append(out, fmt.Sprintf("%s: %d checks were decided by fail mode (shard unavailable)", who, n))
	}
	if r.AccuracyNote != "" {
		out = append(out, fmt.Sprintf("%s: accuracy %s", who, r.AccuracyNote))
	}
	if r.CPUNote != "" {
		out = append(out, fmt.Sprintf("%s: cpu: %s", who, r.CPUNote))
	}
	if sv := r.ServerMS; sv != nil {
		out = append(out, fmt.Sprintf("%s: decided inside the nodes (%d requests, from quorate_check_duration_seconds): p50 %s, p90 %s, p99 %s, p99.9 %s",
			who, sv.Requests, bound(sv.P50LE), bound(sv.P90LE), bound(sv.P99LE), bound(sv.P999LE)))
	}
	if r.ServerNote != "" {
		out = append(out, fmt.Sprintf("%s: server-side latency: %s", who, r.ServerNote))
	}
	if o := r.OpenLoop; o != nil && o.Late > 0 {
		out = append(out, fmt.Sprintf("%s: %d requests sent late (up to %.1fms behind schedule; latency counts from the schedule)", who, o.Late, o.MaxLagMS))
	}
	if r.Interrupted {
		out = append(out, fmt.Sprintf("%s: interrupted; partial results", who))
	}
	return out
}

// count formats a rate: whole numbers, since a benchmark's rates are not
// meaningful to a fraction of a request.
func count(v float64) string {
	return fmt.Sprintf("%.0f", v)
}

// millis formats milliseconds with three significant digits at most.
func millis(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func ratio(v float64) string {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", v)
}
