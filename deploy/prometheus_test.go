package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const promDir = repoRoot + "/deploy/prometheus"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	RuleFiles          []string `yaml:"rule_files"`
	EvaluationInterval string   `yaml:"evaluation_interval"`
	Tests              []struct {
		Interval    string `yaml:"interval"`
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// decodeStrict decodes a YAML file, refusing fields v has no place for.
func decodeStrict(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// promtool runs the real promtool (Debian's prometheus package, which
// .ci/run installs) in deploy/prometheus.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: apt-get install prometheus (README, Development)")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = promDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestPromtool(t *testing.T) {
	promtool(t, "check", "rules", "alerts.yml")
	promtool(t, "test", "rules", "alerts_test.yml")
}

func TestAlerts(t *testing.T) {
	var rf ruleFile
	decodeStrict(t, filepath.Join(promDir, "alerts.yml"), &rf)
	known := knownMetrics(t)
	readme, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	used := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("group %s: alert %q: want a unique name", g.Name, r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q; want critical (pages) or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if r.For == "" {
				t.Errorf("%s: no for: a single bad scrape would page", r.Alert)
			}
			if !bytes.Contains(readme, []byte("### "+r.Alert)) {
				t.Errorf("%s: deploy/README.md has no \"### %s\" runbook section", r.Alert, r.Alert)
			}
			for _, n := range checkExpr(t, r.Alert, r.Expr, known) {
				used[n] = true
			}
		}
	}
	// What must page someone, by the metric that shows it.
	for _, n := range []string{"up", "quorate_shards_without_leader", "quorate_group_leader", "quorate_unavailable_total",
		"quorate_policy_decisions_total", "quorate_policy_version", "quorate_breaker_open_shards",
		"quorate_decision_log_dropped_total", "quorate_wal_sync_duration_seconds_bucket"} {
		if !used[n] {
			t.Errorf("no alert uses %s", n)
		}
	}
	checkAlertTests(t, seen)
}

// checkAlertTests: every alert has a promtool case where it fires and one
// where it does not, and the tests name no alert that does not exist.
func checkAlertTests(t *testing.T, alerts map[string]bool) {
	t.Helper()
	var rt ruleTests
	decodeStrict(t, filepath.Join(promDir, "alerts_test.yml"), &rt)
	if !slices.Equal(rt.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("alerts_test.yml tests %v; want alerts.yml", rt.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if !alerts[a.Alertname] {
				t.Errorf("alerts_test.yml tests %s, which is no alert", a.Alertname)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("%s: a case where it fires: %v, where it does not: %v; want both", a, fires[a], quiet[a])
		}
	}
}
