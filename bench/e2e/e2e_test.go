package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/internal/await"
)

// quorate is the binary under test, built by TestMain.
var quorate string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quorate-bench-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	quorate = filepath.Join(dir, "quorate")
	_, file, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-o", quorate, "./cmd/quorate")
	build.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building quorate: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of quorate bench produced.
type result struct {
	code           int
	stdout, stderr string
	report         map[string]any
}

// runBench runs quorate bench with args plus --json, bounded by a generous
// deadline so a hung run fails instead of stalling the suite.
func runBench(t *testing.T, args ...string) result {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	cmd := exec.Command(quorate, append([]string{"bench", "--json", jsonPath}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGINT)
		<-done
		t.Fatalf("quorate bench %v did not finish in 90s\nstderr:\n%s", args, errOut.String())
	}
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if b, err := os.ReadFile(jsonPath); err == nil {
		if err := json.Unmarshal(b, &r.report); err != nil {
			t.Fatalf("JSON report: %v\n%s", err, b)
		}
	}
	return r
}

func num(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("report has no number %q: %v", key, m[key])
	}
	return v
}

// checkAccurate holds a run to the admission bounds: never more than an
// exact limiter allows, and at least 90% of it when demand exceeds it.
//
// Strict decisions carry the time the bucket was charged, so they must be
// exact: no over-admission at all. A leased decision carries the time its
// lease was spent, while the bucket was charged when the lease was granted,
// earlier and unseen by the client; replayed at spend times, admissions of
// a correct leased limiter can bunch up past the bucket's burst by a check
// or two. slack is that allowance, as a fraction of what the limit allowed.
func checkAccurate(t *testing.T, rep map[string]any, slack float64) {
	t.Helper()
	admitted, allowed := num(t, rep, "admitted"), num(t, rep, "allowed_by_limit")
	checks, over := num(t, rep, "checks"), num(t, rep, "over_admitted")
	tolerance := 0.0
	if slack > 0 {
		tolerance = max(2, slack*allowed)
	}
	if admitted > allowed+tolerance || over > tolerance {
		t.Errorf("admitted %v of %v allowed, over-admitted %v (tolerance %v): a limiter must never admit more", admitted, allowed, over, tolerance)
	}
	if checks > allowed && admitted < 0.9*allowed {
		t.Errorf("admitted %v of %v allowed with demand %v above it: under 90%%", admitted, allowed, checks)
	}
	if allowed == 0 {
		t.Errorf("nothing allowed: the accountant saw no arrivals")
	}
}

// checkNoProcessesLeft fails if any process the run metered, other than
// the tool, is still alive: --local must stop its agents.
func checkNoProcessesLeft(t *testing.T, rep map[string]any) {
	t.Helper()
	procs, _ := rep["processes"].([]any)
	var nodes int
	for _, p := range procs {
		m := p.(map[string]any)
		if m["name"] == "tool" {
			continue
		}
		nodes++
		pid := int(m["pid"].(float64))
		// The agents are the tool's children; it waited for them, so
		// signal 0 must find nothing.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node %v (pid %d) still exists after the run (kill 0: %v)", m["name"], pid, err)
		}
	}
	if nodes != 3 {
		t.Errorf("%d node processes metered; want 3: %v", nodes, procs)
	}
}

func TestLocalStrict(t *testing.T) {
	// One hot key at 50/s: demand is far above the limit, which is where
	// admission accuracy is tested hardest.
	plot := filepath.Join(t.TempDir(), "out.png")
	r := runBench(t, "--local", "3", "--mode", "strict", "--duration", "3s", "--warmup", "500ms",
		"--distribution", "hot", "--limit", "50", "--plot", plot, "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	rep := r.report
	if rep["target"] != "quorate" || rep["mode"] != "strict" {
		t.Errorf("target %v mode %v", rep["target"], rep["mode"])
	}
	if num(t, rep, "checks_per_sec") <= 0 || num(t, rep, "requests") <= 0 {
		t.Errorf("no throughput: %v checks/s", rep["checks_per_sec"])
	}
	if num(t, rep, "errors") != 0 {
		t.Errorf("errors: %v", rep["errors_by_code"])
	}
	if d := num(t, rep, "duration_s"); d < 2.9 || d > 10 {
		t.Errorf("duration_s %v; want about 3", d)
	}
	lat := rep["latency_ms"].(map[string]any)
	if lat["p50"].(float64) <= 0 || lat["p50"].(float64) > lat["max"].(float64) {
		t.Errorf("latency %v", lat)
	}
	checkAccurate(t, rep, 0)
	cores := rep["cpu_cores"].(map[string]any)
	for _, k := range []string{"tool", "n1", "n2", "n3"} {
		if _, ok := cores[k]; !ok {
			t.Errorf("cpu_cores lacks %s: %v", k, cores)
		}
	}
	if num(t, rep, "server_cores") <= 0 {
		t.Errorf("server_cores %v", rep["server_cores"])
	}
	checkServerSide(t, r)
	checkNoProcessesLeft(t, rep)
	if !strings.Contains(r.stdout, "quorate strict") || !strings.Contains(r.stdout, "CHECKS/S") {
		t.Errorf("no table on stdout:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("--quiet, yet stderr:\n%s", r.stderr)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("--plot: %v", err)
	}
}

// TestLocalLeased runs leased checks on one hot key: the run must pass the
// same bounds as strict, give or take the lease timing the accountant
// cannot see (checkAccurate's slack), and report the nodes' own latency.
func TestLocalLeased(t *testing.T) {
	r := runBench(t, "--local", "3", "--mode", "leased", "--duration", "2s", "--warmup", "200ms",
		"--distribution", "hot", "--limit", "50", "--quiet")
	rep := r.report
	if rep == nil || r.code != 0 {
		t.Fatalf("exit %d, report %v\nstderr:\n%s", r.code, rep != nil, r.stderr)
	}
	if rep["mode"] != "leased" {
		t.Errorf("mode %v", rep["mode"])
	}
	checkNoProcessesLeft(t, rep)
	if num(t, rep, "errors") != 0 || num(t, rep, "checks_per_sec") <= 0 {
		t.Errorf("errors %v, %v checks/s", rep["errors_by_code"], rep["checks_per_sec"])
	}
	checkAccurate(t, rep, 0.01)
	checkServerSide(t, r)
}

// TestLocalEmbedded runs the hot key through limiters embedded in the
// bench process (--api embedded), three as three gateways: accounted like
// the nodes' leased checks, and held to the same bounds.
func TestLocalEmbedded(t *testing.T) {
	r := runBench(t, "--local", "3", "--api", "embedded", "--mode", "leased", "--duration", "2s", "--warmup", "200ms",
		"--distribution", "hot", "--limit", "50", "--quiet")
	rep := r.report
	if rep == nil || r.code != 0 {
		t.Fatalf("exit %d, report %v\nstderr:\n%s", r.code, rep != nil, r.stderr)
	}
	if rep["api"] != "embedded" {
		t.Errorf("api %v, want embedded", rep["api"])
	}
	checkNoProcessesLeft(t, rep)
	if num(t, rep, "errors") != 0 || num(t, rep, "checks_per_sec") <= 0 {
		t.Errorf("errors %v, %v checks/s", rep["errors_by_code"], rep["checks_per_sec"])
	}
	checkAccurate(t, rep, 0.01)
}

// checkServerSide checks that the nodes' histograms counted every measured
// request, and the table's note says so.
func checkServerSide(t *testing.T, r result) {
	t.Helper()
	sv, ok := r.report["server_ms"].(map[string]any)
	if !ok {
		t.Errorf("no server_ms (server_note %v)", r.report["server_note"])
		return
	}
	if sv["requests"] != r.report["requests"] {
		t.Errorf("server_ms counted %v requests; the run made %v", sv["requests"], r.report["requests"])
	}
	if p50, p99 := sv["p50_le"].(float64), sv["p99_le"].(float64); p50 <= 0 || p99 < p50 {
		t.Errorf("server_ms %v", sv)
	}
	if !strings.Contains(r.stdout, "decided inside the nodes") {
		t.Errorf("no server-side note under the table:\n%s", r.stdout)
	}
}

// TestInterruptStopsTheCluster sends SIGINT in the middle of a long run:
// the tool must stop at once, report what it measured, exit 1, and stop
// its agents.
func TestInterruptStopsTheCluster(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	cmd := exec.Command(quorate, "bench", "--local", "3", "--duration", "10m", "--warmup", "0s", "--json", jsonPath)
	var out bytes.Buffer
	errOut := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = &out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // if it fails before the SIGINT
	await.Until(t, 60*time.Second, func() error {
		if !strings.Contains(errOut.String(), "closed loop") {
			return fmt.Errorf("the run did not start:\n%s", errOut.String())
		}
		return nil
	})
	// The interruption is meant to come mid-run, once requests were sent;
	// bench prints no count while it runs (stderr is no terminal), so the
	// run is given a second: the interval is what is under test.
	time.Sleep(time.Second)
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("still running 30s after SIGINT:\n%s", errOut.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit %v; want status 1", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v to stop", took)
	}
	if !strings.Contains(errOut.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", errOut.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatalf("no partial report: %v", err)
	}
	var rep map[string]any
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep["interrupted"] != true || num(t, rep, "requests") == 0 {
		t.Errorf("interrupted %v after %v requests; want a partial report", rep["interrupted"], rep["requests"])
	}
	checkNoProcessesLeft(t, rep)
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine of exec and
// the test reading it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
