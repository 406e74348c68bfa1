package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// benchFakeLimiter is a RateLimiter that allows every strict check at once and
// answers leased checks UNIMPLEMENTED, as the server did before leases.
type benchFakeLimiter struct {
	pb.UnimplementedRateLimiterServer
	checks  atomic.Int64
	streams atomic.Int64 // CheckStreams opened
}

func (f *benchFakeLimiter) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	if req.GetMode() == pb.Mode_MODE_LEASED {
		return nil, status.Error(codes.Unimplemented, "mode: LEASED is not implemented yet; use STRICT")
	}
	resp := &pb.CheckResponse{Decision: pb.Decision_DECISION_ALLOW}
	for range req.GetItems() {
		f.checks.Add(1)
		resp.Results = append(resp.Results, &pb.ItemResult{
			Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT,
			DecidedAtUnixNano: time.Now().UnixNano(),
		})
	}
	return resp, nil
}

// CheckStream answers each request as Check would, in order.
func (f *benchFakeLimiter) CheckStream(st pb.RateLimiter_CheckStreamServer) error {
	f.streams.Add(1)
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		a := &pb.CheckStreamResponse{Id: req.GetId()}
		if resp, err := f.Check(st.Context(), req.GetCheck()); err != nil {
			a.Result = &pb.CheckStreamResponse_Error{Error: status.Convert(err).Proto()}
		} else {
			a.Result = &pb.CheckStreamResponse_Response{Response: resp}
		}
		if err := st.Send(a); err != nil {
			return err
		}
	}
}

// startFake serves a benchFakeLimiter on a free loopback port.
func startBenchFake(t *testing.T) (string, *benchFakeLimiter) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &benchFakeLimiter{}
	pb.RegisterRateLimiterServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String(), f
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return m
}

func TestBenchFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "no target"},
		{[]string{"--local", "3", "--addrs", "127.0.0.1:1"}, "not both"},
		{[]string{"--local", "20"}, "within 1..9"},
		{[]string{"--addrs", "x:1", "--mode", "eventual"}, "--mode"},
		{[]string{"--addrs", "x:1", "--distribution", "pareto"}, "distribution"},
		{[]string{"--addrs", "x:1", "--algorithm", "bogus"}, "algorithm"},
		{[]string{"--addrs", "x:1", "--items", "0"}, "items"},
		{[]string{"--addrs", "x:1", "--duration", "0"}, "no bound"},
		{[]string{"--addrs", "x:1", "--concurrency", "0"}, "concurrency"},
		{[]string{"--addrs", "x:1", "--baseline", "http://x"}, "Redis URL"},
		{[]string{"--addrs", "x:1", "--baseline", "redis://x:1", "--algorithm", "gcra"}, "no standard Lua script"},
		{[]string{"--addrs", "x:1", "--suite", "standard", "--items", "10"}, "cannot be combined with --suite"},
		{[]string{"--addrs", "x:1", "--suite", "standard", "--plot", "p.png"}, "--out"},
		{[]string{"--addrs", "x:1", "--suite", "fast"}, "only suite is standard"},
		{[]string{"--addrs", "x:1", "--out", "dir"}, "only with --suite"},
		{[]string{"--local", "3", "--pids", "1"}, "--pids"},
		{[]string{"--addrs", "x:1", "--route", "nearest"}, "--route"},
		{[]string{"--addrs", "x:1", "--api", "grpc-web"}, `--api "grpc-web": want unary, stream, envoy or embedded`},
		{[]string{"--addrs", "x:1", "--api", "embedded", "--gateways", "0"}, `--gateways 0: must be within 1..64`},
		{[]string{"--addrs", "x:1", "--gateways", "2"}, `--gateways: only with --api embedded`},
		{[]string{"--addrs", "x:1", "--api", "embedded", "--baseline", "noop"}, `--baseline noop: only with --api unary or stream`},
		{[]string{"--addrs", "x:1", "--baseline", "native"}, "--baseline native: only with --api envoy"},
		{[]string{"--addrs", "x:1", "--api", "envoy", "--mode", "leased"}, "--api envoy: Envoy's checks are decided strict"},
		{[]string{"--addrs", "x:1", "--streams-per-node", "2"}, "--streams-per-node: only with --api stream"},
		{[]string{"--addrs", "x:1", "--api", "stream", "--streams-per-node", "0"}, "--streams-per-node 0: must be at least 1"},
		{[]string{"--addrs", "x:1", "--baseline", "noop", "--baseline", "noop"}, `--baseline "noop" given twice`},
		{[]string{"--addrs", "x:1", "--baseline", "noop", "--baseline", "nope"}, `--baseline "nope": want a Redis URL, redis://host:port, noop, native or plain`},
		{[]string{"--addrs", "x:1", "--node-arg", "--lease-ttl=1s"}, "--node-arg: only with --local"},
		{[]string{"--local", "1", "--baseline", "plain"}, "--baseline plain: it is the local cluster without --node-arg"},
		// With the noop baseline too, Redis still needs a script for the algorithm.
		{[]string{"--addrs", "x:1", "--baseline", "noop", "--baseline", "redis://x:1", "--algorithm", "gcra"}, "no standard Lua script"},
	} {
		r := runCLI(t, append([]string{"bench"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

func TestBenchAgainstServer(t *testing.T) {
	addr, f := startBenchFake(t)
	out := filepath.Join(t.TempDir(), "out.json")
	plot := filepath.Join(t.TempDir(), "out.png")
	r := runCLI(t, "bench", "--plaintext", "--addrs", addr, "--requests", "200", "--duration", "30s", "--concurrency", "4",
		"--items", "3", "--warmup", "0s", "--json", out, "--plot", plot, "--route", "any") // the fake has no Admin.Status
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readJSON(t, out)
	if rep["requests"].(float64) != 200 || rep["checks"].(float64) != 600 || f.checks.Load() != 600 {
		t.Errorf("requests %v checks %v (server saw %d); want 200 and 600", rep["requests"], rep["checks"], f.checks.Load())
	}
	if rep["errors"].(float64) != 0 || rep["admitted"] != rep["allowed_by_limit"] || rep["over_admitted"].(float64) != 0 {
		t.Errorf("errors %v admitted %v allowed %v over %v", rep["errors"], rep["admitted"], rep["allowed_by_limit"], rep["over_admitted"])
	}
	// The server listens in this very process, so discovery by port finds it.
	if rep["server_cores"] == nil || rep["cpu_note"] != nil {
		t.Errorf("server not found by port: cores %v, note %v", rep["cpu_cores"], rep["cpu_note"])
	}
	for _, want := range []string{"workload: uniform over 10000 keys, 3 item(s)/request", "load: closed loop, 4 clients", "quorate strict"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(plot); err != nil {
		t.Errorf("--plot: %v", err)
	}
}

func TestBenchOpenLoop(t *testing.T) {
	addr, _ := startBenchFake(t)
	out := filepath.Join(t.TempDir(), "out.json")
	r := runCLI(t, "bench", "--plaintext", "--addrs", addr, "--rate", "200", "--duration", "1s", "--warmup", "0s", "--json", out, "--quiet", "--route", "any")
	if r.code != exitOK {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	rep := readJSON(t, out)
	// 200/s for 1s schedules exactly 200 requests.
	if rep["requests"].(float64) != 200 || rep["rate"].(float64) != 200 || rep["open_loop"] == nil || rep["service_ms"] == nil {
		t.Errorf("requests %v rate %v open_loop %v", rep["requests"], rep["rate"], rep["open_loop"])
	}
	// Without --concurrency, an open loop gets room for 1024 in flight.
	if rep["concurrency"].(float64) != 1024 {
		t.Errorf("concurrency %v; want 1024", rep["concurrency"])
	}
	if r.stderr != "" {
		t.Errorf("--quiet, yet stderr %q", r.stderr)
	}
}

func TestBenchEveryRequestFailed(t *testing.T) {
	addr, _ := startBenchFake(t)
	out := filepath.Join(t.TempDir(), "out.json")
	r := runCLI(t, "bench", "--plaintext", "--addrs", addr, "--mode", "leased", "--requests", "50", "--warmup", "0s", "--json", out, "--quiet")
	if r.code != exitFailure {
		t.Fatalf("exit %d; want %d\n%s", r.code, exitFailure, r.stderr)
	}
	for _, want := range []string{"every request to quorate leased failed", "50× UNIMPLEMENTED", "LEASED is not implemented yet"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	rep := readJSON(t, out)
	if codes := rep["errors_by_code"].(map[string]any); codes["UNIMPLEMENTED"].(float64) != 50 {
		t.Errorf("errors_by_code %v", codes)
	}
	if !strings.Contains(r.stdout, "50× UNIMPLEMENTED: mode: LEASED") {
		t.Errorf("the table's notes lack the error:\n%s", r.stdout)
	}
}

func TestBenchSuite(t *testing.T) {
	addr, _ := startBenchFake(t)
	dir := filepath.Join(t.TempDir(), "results", "run1")
	r := runCLI(t, "bench", "--plaintext", "--addrs", addr, "--suite", "standard", "--duration", "200ms", "--warmup", "0s", "--out", dir, "--route", "any")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readJSON(t, filepath.Join(dir, "report.json"))
	scen := rep["scenarios"].([]any)
	var ran, skipped int
	for _, s := range scen {
		m := s.(map[string]any)
		name := m["scenario"].(string)
		if strings.HasPrefix(name, "leased") {
			// The fake does not implement leased: preflight skips it.
			if !strings.Contains(m["skipped"].(string), "UNIMPLEMENTED") {
				t.Errorf("%s: skipped %v", name, m["skipped"])
			}
			skipped++
			continue
		}
		ran++
		if _, err := os.Stat(filepath.Join(dir, name+".png")); err != nil {
			t.Errorf("%s: no plot: %v", name, err)
		}
	}
	if ran < 5 || skipped != 3 {
		t.Errorf("%d scenarios ran, %d skipped; want the standard suite", ran, skipped)
	}
	txt, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	if err != nil || !strings.Contains(string(txt), "strict-unary") || !strings.Contains(string(txt), "strict-open: open loop at half") {
		t.Errorf("report.txt: %v\n%s", err, txt)
	}
	if target, err := os.Readlink(filepath.Join(dir, "..", "latest")); err != nil || target != "run1" {
		t.Errorf("latest -> %q, %v; want run1", target, err)
	}
}

// metricsAddrs maps the --addrs given to the nodes' HTTP addresses through
// the cluster's status, and says why when it cannot.
func TestMetricsAddrs(t *testing.T) {
	f := &fakeLimiter{}
	addr := startFakeNode(t, f)
	other := "127.0.0.1:1" // a node the status names but nothing serves
	f.mu.Lock()
	f.nodes = []*pb.NodeStatus{
		{Id: "n1", RpcAddr: addr, HttpAddr: "127.0.0.1:7501"},
		{Id: "n2", RpcAddr: other, HttpAddr: "127.0.0.1:7502"},
	}
	f.mu.Unlock()
	ctx := context.Background()
	got, err := metricsAddrs(ctx, []string{other, addr}, plaintext) // the first cannot answer: the next one does
	if err != nil || !reflect.DeepEqual(got, []string{"127.0.0.1:7502", "127.0.0.1:7501"}) {
		t.Errorf("metricsAddrs = %v, %v; want both HTTP addresses in --addrs order", got, err)
	}
	if _, err := metricsAddrs(ctx, []string{addr, "localhost:7401"}, plaintext); err == nil || !strings.Contains(err.Error(), "localhost:7401 is not a node's RPC address") {
		t.Errorf("an address the status does not name: %v", err)
	}
	f.mu.Lock()
	f.nodes = []*pb.NodeStatus{{Id: "n1", RpcAddr: addr}} // an older node: no HTTP address
	f.mu.Unlock()
	if _, err := metricsAddrs(ctx, []string{addr}, plaintext); err == nil || !strings.Contains(err.Error(), "gives no HTTP address for "+addr) {
		t.Errorf("a status without HTTP addresses: %v", err)
	}
	// Nodes started on unspecified hosts are reached where --addrs says.
	_, port, _ := net.SplitHostPort(addr)
	f.mu.Lock()
	f.nodes = []*pb.NodeStatus{{Id: "n1", RpcAddr: "0.0.0.0:" + port, HttpAddr: ":7501"}}
	f.mu.Unlock()
	if got, err := metricsAddrs(ctx, []string{addr}, plaintext); err != nil || !reflect.DeepEqual(got, []string{"127.0.0.1:7501"}) {
		t.Errorf("unspecified hosts: %v, %v; want [127.0.0.1:7501]", got, err)
	}
}

// --baseline noop starts a no-op RateLimiter server (this binary, as
// noop-server), runs the same workload through it with the same --api, and
// reports the ratio to it; it is stopped afterwards.
func TestBenchNoopBaseline(t *testing.T) {
	t.Setenv(childModeEnv, "main") // the noop server is this test binary, playing quorate
	for _, api := range []string{"unary", "stream"} {
		t.Run(api, func(t *testing.T) {
			addr, f := startBenchFake(t)
			out := filepath.Join(t.TempDir(), "out.json")
			r := runCLI(t, "bench", "--plaintext", "--addrs", addr, "--requests", "400", "--duration", "30s", "--concurrency", "8",
				"--warmup", "0s", "--api", api, "--route", "any", "--baseline", "noop", "--json", out, "--quiet")
			if r.code != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			rep := readJSON(t, out)
			runs := rep["runs"].([]any)
			if len(runs) != 2 {
				t.Fatalf("%d runs; want quorate and noop:\n%s", len(runs), r.stdout)
			}
			q, n := runs[0].(map[string]any), runs[1].(map[string]any)
			if q["target"] != "quorate" || n["target"] != "noop" || n["mode"] != "allow" || q["api"] != api || n["api"] != api {
				t.Errorf("runs: %v %v %v / %v %v %v", q["target"], q["mode"], q["api"], n["target"], n["mode"], n["api"])
			}
			// Two rounds of 200 each per target; the fake saw quorate's only.
			if q["requests"].(float64) != 400 || n["requests"].(float64) != 400 || n["errors"].(float64) != 0 || f.checks.Load() != 400 {
				t.Errorf("quorate %v requests, noop %v (%v errors); the fake saw %d checks", q["requests"], n["requests"], n["errors"], f.checks.Load())
			}
			if api == "stream" && f.streams.Load() == 0 {
				t.Error("--api stream, yet no CheckStream reached the server")
			}
			if api == "unary" && f.streams.Load() != 0 {
				t.Error("--api unary, yet CheckStream was called")
			}
			ratios := rep["ratios"].([]any)
			if len(ratios) != 1 || ratios[0].(map[string]any)["baseline"] != "noop" || rep["ratio"].(map[string]any)["baseline"] != "noop" {
				t.Errorf("ratios %v, ratio %v", rep["ratios"], rep["ratio"])
			}
			// The noop server's CPU is metered apart, by its pid.
			if procs, _ := n["processes"].([]any); len(procs) != 2 || !strings.HasPrefix(procs[1].(map[string]any)["name"].(string), "noop-server:") {
				t.Errorf("noop processes %v; want the tool and noop-server:<pid>", n["processes"])
			}
			for _, want := range []string{"api: " + api, "quorate strict (" + api + ")", "noop allow (" + api + ")", "ratio quorate/noop",
				"noop allow (" + api + "): accuracy not computed: the noop baseline allows every check"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			// Stopped afterwards.
			pid := int(n["processes"].([]any)[1].(map[string]any)["pid"].(float64))
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("noop server %d still running", pid)
			}
		})
	}
}

// --baseline plain is a second local cluster without --node-arg: the
// arguments reach the first cluster's agents only, {node} expanded.
func TestBenchPlainBaseline(t *testing.T) {
	t.Setenv(childModeEnv, "main") // the agents are this test binary
	dir := t.TempDir()
	out := filepath.Join(dir, "out.json")
	r := runCLI(t, "bench", "--local", "1", "--node-arg=--decision-log=file:"+filepath.Join(dir, "{node}.jsonl"), "--baseline", "plain",
		"--requests", "300", "--duration", "60s", "--concurrency", "4", "--warmup", "0s", "--keys", "3", "--limit", "20", "--period", "1h",
		"--json", out, "--quiet")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readJSON(t, out)
	runs := rep["runs"].([]any)
	if len(runs) != 2 {
		t.Fatalf("%d runs; want quorate and plain:\n%s", len(runs), r.stdout)
	}
	q, p := runs[0].(map[string]any), runs[1].(map[string]any)
	if q["target"] != "quorate" || p["target"] != "plain" || rep["ratio"].(map[string]any)["baseline"] != "plain" {
		t.Errorf("targets %v and %v, ratio %v", q["target"], p["target"], rep["ratio"])
	}
	if q["addrs"] == nil || reflect.DeepEqual(q["addrs"], p["addrs"]) {
		t.Errorf("quorate at %v and plain at %v: want two clusters", q["addrs"], p["addrs"])
	}
	// 3 keys x 20 admitted per target and round, the rest denied, and
	// every deny is in the log of the cluster that had --node-arg.
	log, err := os.ReadFile(filepath.Join(dir, "n1.jsonl"))
	if err != nil {
		t.Fatalf("the node's decision log: %v", err)
	}
	denied := int(q["requests"].(float64) - q["allowed_requests"].(float64) - q["errors"].(float64))
	if denies := strings.Count(string(log), `"decision":"DENY"`); denies != denied || denies == 0 {
		t.Errorf("%d denies in the log; quorate's runs denied %d", denies, denied)
	}
	// And each with the request's id, one per request.
	ids := map[string]bool{}
	for l := range strings.Lines(string(log)) {
		var rec struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || !strings.HasPrefix(rec.RequestID, "bench-") || ids[rec.RequestID] {
			t.Fatalf("log line %q: request id not the bench's, or seen before (%v)", l, err)
		}
		ids[rec.RequestID] = true
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl")); len(files) != 1 {
		t.Errorf("decision logs %v: want n1's alone (plain has none)", files)
	}
	if !strings.Contains(r.stdout, "ratio quorate/plain") {
		t.Errorf("stdout lacks the ratio:\n%s", r.stdout)
	}
}

// plaintext dials the fake servers, which serve without TLS.
var plaintext = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
