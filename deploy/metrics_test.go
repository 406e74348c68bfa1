package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
)

// pendingMetrics are named by the alerts and the dashboard ahead of the
// code that will export them (other work in progress).
var pendingMetrics = []string{
	"quorate_decision_log_dropped_total", // counter: decision log records dropped at a full queue
}

var metricName = regexp.MustCompile(`Name:\s*"(quorate_[a-z0-9_]+)"`)

// knownMetrics are the metric names the repository's code defines (every
// Name: "quorate_..." of its non-test Go files), their histogram series,
// the pending one and Prometheus' own up.
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{"up": true}
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range metricName.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !known["quorate_checks_total"] || !known["quorate_wal_sync_duration_seconds"] || len(known) < 40 {
		t.Fatalf("found only %d metric names in the code; the pattern %v no longer matches how metrics are defined", len(known), metricName)
	}
	for _, n := range pendingMetrics {
		if known[n] {
			t.Logf("%s is defined in the code now: drop it from pendingMetrics", n)
		}
		known[n] = true
	}
	for n := range known {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			known[n+suffix] = true
		}
	}
	return known
}

// grafanaVars stand in for the dashboard's variables so that its queries
// parse as PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$job", "quorate", "$instance", ".*")

// exprMetrics parses a PromQL expression and returns the metric names it
// selects; a selector without a metric name is an error.
func exprMetrics(expr string) ([]string, error) {
	e, err := metricsql.Parse(grafanaVars.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	metricsql.VisitAll(e, func(e metricsql.Expr) {
		me, ok := e.(*metricsql.MetricExpr)
		if !ok {
			return
		}
		for _, lfs := range me.LabelFilterss {
			if len(lfs) == 0 || lfs[0].Label != "__name__" || lfs[0].IsRegexp || lfs[0].IsNegative {
				bad = fmt.Errorf("a selector without a plain metric name: %s", me.AppendString(nil))
				return
			}
			names = append(names, lfs[0].Value)
		}
	})
	sort.Strings(names)
	return names, bad
}

// checkExpr fails the test if expr does not parse or selects a metric the
// code does not define; it returns the names it selects.
func checkExpr(t *testing.T, where, expr string, known map[string]bool) []string {
	t.Helper()
	names, err := exprMetrics(expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
	}
	for _, n := range names {
		if !known[n] {
			t.Errorf("%s: %s is no metric of quorate's code (nor pending)", where, n)
		}
	}
	return names
}

func TestExprMetrics(t *testing.T) {
	names, err := exprMetrics(`sum by (mode) (rate(quorate_checks_total{job=~"$job"}[$__rate_interval])) / on() group_left sum(up)`)
	if err != nil || strings.Join(names, ",") != "quorate_checks_total,up" {
		t.Errorf("exprMetrics = %v, %v", names, err)
	}
	if _, err := exprMetrics(`rate({job="quorate"}[5m])`); err == nil {
		t.Error("a selector without a metric name passed")
	}
	if _, err := exprMetrics(`sum(rate(quorate_checks_total[5m])`); err == nil {
		t.Error("an unbalanced expression parsed")
	}
}
