package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/bench"
	"github.com/quorate/quorate/bench/embeddeddriver"
	"github.com/quorate/quorate/bench/envoydriver"
	"github.com/quorate/quorate/bench/noopserver"
	"github.com/quorate/quorate/bench/proccpu"
	"github.com/quorate/quorate/bench/progress"
	"github.com/quorate/quorate/bench/quoratedriver"
	"github.com/quorate/quorate/bench/redisdriver"
	"github.com/quorate/quorate/bench/report"
	"github.com/quorate/quorate/bench/suite"
	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/localcluster"
)

// benchFlags are the flags of "quorate bench". The names are a contract
// with scripts (issue 5): add flags, never rename them.
type benchFlags struct {
	creds     credFlags
	addrs     []string
	local     int
	pids      []int
	mode      string
	api       string
	gateways  int
	streams   int
	baselines []string
	nodeArgs  []string
	route     string

	duration    time.Duration
	requests    int64
	concurrency int
	rate        float64
	timeout     time.Duration
	rounds      int
	warmup      time.Duration

	keys         int
	distribution string
	zipfS        float64
	items        int
	cost         int64
	algorithm    string
	limit        int64
	period       time.Duration
	burst        int64
	failOpen     bool
	seed         uint64

	suite string
	out   string
	json  string
	plot  string
	quiet bool
}

// openLoopInFlight bounds an open loop's requests in flight unless
// --concurrency says otherwise.
const openLoopInFlight = 1024

// workloadFlags shape a single run's workload and load; a suite defines its
// own, so they cannot be combined with --suite.
var workloadFlags = []string{"mode", "requests", "concurrency", "rate", "keys", "distribution", "zipf-s",
	"items", "cost", "algorithm", "limit", "period", "burst", "fail-open"}

func (a *app) benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a cluster's throughput, latency and admission accuracy, side by side with a baseline",
		Long: `Measure a quorate cluster: throughput (requests and checks per second), latency
percentiles from HDR histograms, errors by code, admission accuracy, and the
CPU cores used by each server process and by this tool.

The target is a running cluster (--addrs) or one this command starts and
removes afterwards (--local N: N agents of this binary on free loopback ports,
data in a temporary directory). Checks go one RateLimiter.Check call each
(--api unary), or over RateLimiter.CheckStream (--api stream), a few streams
per node (--streams-per-node) shared by all the clients, as a gateway sends
them, or as Envoy's ShouldRateLimit calls (--api envoy: the workload's limits
are imported as Envoy policies first; periods must be Envoy units), or they
are decided in this process by --gateways limiters embedded as gateways embed
them (--api embedded: leased checks from each limiter's own leases, strict
ones through the Gateway service; a token with the lease scope, which --local
takes from its dev credentials).

Baselines run the same workload with the same clients, alternating with
quorate round by round, and the report adds the ratio quorate/baseline for
each: --baseline redis://host:port is Redis with the standard Lua
token-bucket or sliding-window-counter script; --baseline noop is a no-op
RateLimiter server (a process of this binary that this command starts and
stops) that allows every check at once through the same --api, the floor of
what gRPC and the machine allow; --baseline native (with --api envoy or embedded) is
quorate's own unary Check on the same cluster; --baseline plain (with --local
and --node-arg) is a second local cluster of the same size started without
the --node-arg arguments, so what an agent option costs (the decision log,
tracing) is measured in the same run. Repeat --baseline for several.

Load: a closed loop of --concurrency clients, or with --rate an open loop at
a fixed arrival rate, whose latency counts from each request's scheduled send
time so that queueing is not hidden (coordinated omission); --concurrency then
bounds the requests in flight. A run stops after --duration or --requests,
whichever comes first.

Admission accuracy: every run uses fresh buckets; from the limiter's own
decision times the tool computes what an exact limiter would have allowed
(allowed_by_limit) and compares what was admitted: over_admitted checks
exceeded the limit, under_admitted ones were denied although it had room.

--suite standard runs the standard suite (see bench/results/README.md) and,
with --out DIR, writes report.txt, report.json and a plot per scenario there.

Exit status: 0 on success; 1 if every request of a run failed (the errors
are printed by code), a scenario could not run, or the command was
interrupted; 2 for bad flags.`,
		Example: `  quorate bench --local 3 --duration 10s
  quorate bench --addrs 127.0.0.1:7401,127.0.0.1:7402 --distribution zipf --items 10 --json out.json
  quorate bench --local 3 --rate 2000 --duration 30s --plot latency.png
  quorate bench --local 3 --baseline redis://127.0.0.1:6379
  quorate bench --local 3 --mode leased --api stream --baseline noop --baseline redis://127.0.0.1:6379
  quorate bench --local 3 --node-arg=--decision-log=file:{data}/decisions.jsonl --baseline plain --rounds 4
  quorate bench --local 3 --suite standard --out bench/results/today
  quorate bench --local 3 --api envoy --baseline native`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.rate > 0 && !cmd.Flags().Changed("concurrency") {
				// An open loop must not run out of room in flight before
				// the target does: that would make the tool the bottleneck.
				f.concurrency = openLoopInFlight
			}
			if err := f.validate(cmd); err != nil {
				return usageError(err)
			}
			// SIGHUP too: a closed terminal stops the run and its cluster.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			return a.bench(ctx, cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringSliceVar(&f.addrs, "addrs", nil, "gRPC addresses of a running cluster's nodes, comma-separated")
	fl.IntVar(&f.local, "local", 0, "start a local cluster of N nodes for the run, and remove it afterwards")
	fl.IntSliceVar(&f.pids, "pids", nil, "with --addrs: the server processes to meter (default: found by listening port)")
	f.creds.register(fl)
	fl.StringVar(&f.mode, "mode", "strict", "strict or leased")
	fl.StringVar(&f.route, "route", "leader", "where strict checks go: leader (to their shard's leader, learned from Admin.Status: one hop) or any (round-robin; nodes forward what they do not lead)")
	fl.StringVar(&f.api, "api", quoratedriver.APIUnary, "how checks are sent: unary (one Check call each), stream (CheckStream, shared streams), envoy (Envoy's ShouldRateLimit, one call each) or embedded (limiters embedded in the bench process, as in gateways; needs a lease-scope token); --baseline native compares envoy or embedded with unary Check")
	fl.IntVar(&f.gateways, "gateways", 3, "with --api embedded: the limiters embedded in the bench process, each with its own connections and leases, as separate gateways")
	fl.IntVar(&f.streams, "streams-per-node", 1, "with --api stream: streams to each node, shared by all the clients")
	fl.StringArrayVar(&f.baselines, "baseline", nil, "also run the workload against a baseline and compare: a Redis URL (redis://host:port), noop (a no-op RateLimiter server), native (unary Check, with --api envoy or embedded) or plain (a second --local cluster without --node-arg); repeat for several")
	fl.StringArrayVar(&f.nodeArgs, "node-arg", nil, "with --local: an argument added to every node's agent command line ({node} and {data} become its id and data directory); repeat for several. --baseline plain measures the cost of what they turn on")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "measured time per target (0: bounded by --requests only)")
	fl.Int64Var(&f.requests, "requests", 0, "stop after this many requests per target (0: bounded by --duration only)")
	fl.IntVar(&f.concurrency, "concurrency", 16, "closed loop: concurrent clients; open loop: most requests in flight (default 1024 with --rate)")
	fl.Float64Var(&f.rate, "rate", 0, "open loop at this many requests per second (0: closed loop)")
	fl.DurationVar(&f.timeout, "timeout", bench.DefaultTimeout, "deadline of each request")
	fl.IntVar(&f.rounds, "rounds", 0, "rounds the targets alternate in (0: 2 with --baseline, else 1)")
	fl.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured load sent to each target before each round")
	fl.IntVar(&f.keys, "keys", 10_000, "distinct keys (tenants for --distribution mix)")
	fl.StringVar(&f.distribution, "distribution", "uniform", "uniform, zipf, hot (one key) or mix (multi-tenant)")
	fl.Float64Var(&f.zipfS, "zipf-s", bench.DefaultZipfS, "exponent of --distribution zipf, above 1")
	fl.IntVar(&f.items, "items", 1, "limits (items) checked per request")
	fl.Int64Var(&f.cost, "cost", 1, "units each item takes")
	fl.StringVar(&f.algorithm, "algorithm", "token_bucket", "one of "+strings.Join(client.AlgorithmNames(), ", "))
	fl.Int64Var(&f.limit, "limit", 100, "units admitted per period, per key")
	fl.DurationVar(&f.period, "period", time.Second, "period the limit counts over")
	fl.Int64Var(&f.burst, "burst", 0, "bucket capacity; 0 means --limit")
	fl.BoolVar(&f.failOpen, "fail-open", false, "allow items whose shard cannot decide (default: deny, so they cannot pass for admissions)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the key sequence")
	fl.StringVar(&f.suite, "suite", "", `run a predefined suite instead of one workload: "standard"`)
	fl.StringVar(&f.out, "out", "", "with --suite: directory for report.txt, report.json and the plots")
	fl.StringVar(&f.json, "json", "", "write the results as JSON to this file")
	fl.StringVar(&f.plot, "plot", "", "write a PNG of the latency percentiles and throughput over time to this file")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress bar or status lines (the table still goes to stdout)")
	return cmd
}

// validate checks what the flags say together; values of the workload are
// checked by bench itself.
func (f *benchFlags) validate(cmd *cobra.Command) error {
	switch {
	case f.local > 0 && len(f.addrs) > 0:
		return errors.New("--local and --addrs: give one target, not both")
	case f.local == 0 && len(f.addrs) == 0:
		return errors.New("no target: give --addrs of a running cluster, or --local N to start one")
	case f.local < 0 || f.local > 9:
		// Every node is a process on this machine, competing with the
		// others and the tool for its cores: beyond a handful, a local
		// cluster measures the machine, not quorate.
		return fmt.Errorf("--local %d: must be within 1..9", f.local)
	case len(f.pids) > 0 && f.local > 0:
		return errors.New("--pids: only with --addrs (--local meters its own nodes)")
	case len(f.nodeArgs) > 0 && f.local == 0:
		return errors.New("--node-arg: only with --local (a running cluster has its own command lines)")
	case f.rounds < 0:
		return fmt.Errorf("--rounds %d: must not be negative", f.rounds)
	case f.warmup < 0:
		return fmt.Errorf("--warmup %v: must not be negative", f.warmup)
	}
	if _, err := client.ParseRouting(f.route); err != nil {
		return fmt.Errorf("--route: %w", err)
	}
	switch f.api {
	case quoratedriver.APIUnary, quoratedriver.APIStream:
	case apiEmbedded:
		if f.gateways < 1 || f.gateways > 64 {
			return fmt.Errorf("--gateways %d: must be within 1..64", f.gateways)
		}
	case apiEnvoy:
		if strings.EqualFold(f.mode, "leased") {
			return errors.New("--api envoy: Envoy's checks are decided strict; leave --mode at strict")
		}
	default:
		return fmt.Errorf("--api %q: want unary, stream, envoy or embedded", f.api)
	}
	if f.streams < 1 {
		return fmt.Errorf("--streams-per-node %d: must be at least 1", f.streams)
	}
	if cmd.Flags().Changed("streams-per-node") && f.api != quoratedriver.APIStream {
		return errors.New("--streams-per-node: only with --api stream")
	}
	if cmd.Flags().Changed("gateways") && f.api != apiEmbedded {
		return errors.New("--gateways: only with --api embedded")
	}
	seen := map[string]bool{}
	for _, b := range f.baselines {
		if seen[b] {
			return fmt.Errorf("--baseline %q given twice", b)
		}
		seen[b] = true
		if b == plainBaseline {
			if len(f.nodeArgs) == 0 {
				return errors.New("--baseline plain: it is the local cluster without --node-arg; give the --node-arg whose cost to measure")
			}
			continue
		}
		if b == noopBaseline {
			if f.api == apiEnvoy || f.api == apiEmbedded {
				return fmt.Errorf("--baseline noop: only with --api unary or stream (the no-op server speaks RateLimiter only); with --api %s use --baseline native", f.api)
			}
			continue
		}
		if b == nativeBaseline {
			if f.api != apiEnvoy && f.api != apiEmbedded {
				return errors.New("--baseline native: only with --api envoy or embedded (it compares them with the native unary Check)")
			}
			continue
		}
		if u, err := url.Parse(b); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			return fmt.Errorf("--baseline %q: want a Redis URL, redis://host:port, noop, native or plain", b)
		}
	}
	if f.suite != "" {
		if f.suite != "standard" {
			return fmt.Errorf("--suite %q: the only suite is standard", f.suite)
		}
		for _, name := range workloadFlags {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s cannot be combined with --suite: the suite defines its workloads", name)
			}
		}
		if f.plot != "" {
			return errors.New("--plot cannot be combined with --suite: use --out DIR, which gets a plot per scenario")
		}
		return nil
	}
	if f.out != "" {
		return errors.New("--out: only with --suite (use --json and --plot for one run)")
	}
	if _, err := client.ParseMode(f.mode); err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	s := f.scenario()
	if err := s.Workload.Validate(); err != nil {
		return fmt.Errorf("workload: %w", err)
	}
	if err := s.Load.Validate(); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if f.redisBaseline() {
		if err := redisdriver.Supports(s.Workload.Limit); err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
	}
	return nil
}

// plainBaseline is --baseline's name for a second local cluster, started
// without --node-arg: what the arguments cost, measured in the same run.
const plainBaseline = "plain"

// noopBaseline is --baseline's name for the no-op RateLimiter server.
const noopBaseline = "noop"

// nativeBaseline is --baseline's name for quorate's own unary Check on the
// same cluster, the baseline of --api envoy.
const nativeBaseline = "native"

// apiEnvoy sends each request as one Envoy ShouldRateLimit call.
const apiEnvoy = "envoy"

// apiEmbedded decides each request in the bench process, with limiters
// embedded as in gateways (client.Embedded).
const apiEmbedded = "embedded"

// redisBaseline reports whether a baseline is a Redis.
func (f *benchFlags) redisBaseline() bool {
	for _, b := range f.baselines {
		if b != noopBaseline && b != nativeBaseline && b != plainBaseline {
			return true
		}
	}
	return false
}

// apiLine says how checks were sent, for the report's header.
func (f *benchFlags) apiLine() string {
	if f.api == apiEmbedded {
		return fmt.Sprintf("api: embedded (%d limiters in the bench process, as gateways embed them: leased checks decided in-process, strict ones and lease grants through Gateway.Submit)", f.gateways)
	}
	if f.api == apiEnvoy {
		return "api: envoy (envoy.service.ratelimit.v3 ShouldRateLimit, one call per request; the workload's limits imported as Envoy policies)"
	}
	if f.api == quoratedriver.APIStream {
		s := "streams"
		if f.streams == 1 {
			s = "stream"
		}
		return fmt.Sprintf("api: stream (RateLimiter.CheckStream, %d %s per node shared by all clients)", f.streams, s)
	}
	return "api: unary (RateLimiter.Check, one call per request)"
}

// scenario is the single run the flags describe.
func (f *benchFlags) scenario() suite.Scenario {
	mode := strings.ToLower(f.mode)
	if m, err := client.ParseMode(f.mode); err == nil {
		mode = client.ModeName(m)
	}
	return suite.Scenario{
		Name: mode,
		Mode: mode,
		Workload: bench.Workload{
			Distribution: bench.Distribution(f.distribution), Keys: f.keys, Items: f.items, Cost: f.cost,
			ZipfS: f.zipfS,
			Limit: bench.Limit{Algorithm: f.algorithm, Limit: f.limit, Period: f.period, Burst: f.burst, FailOpen: f.failOpen},
		},
		Load: bench.Load{Concurrency: f.concurrency, Rate: f.rate, Duration: f.duration, Requests: f.requests, Timeout: f.timeout},
	}
}

// bench runs the command once the flags are valid.
func (a *app) bench(ctx context.Context, cmd *cobra.Command, f *benchFlags) error {
	disp := progress.New(a.stderr, f.quiet)
	started := time.Now()

	var ct *clusterTarget
	if f.local > 0 {
		c, err := a.launchLocal(ctx, disp, f.local, f.nodeArgs, "")
		if err != nil {
			return err
		}
		// Stopped on every way out, Ctrl-C included: the signal cancels ctx,
		// the run returns, and this runs.
		defer c.close()
		ct = c
	} else {
		ct = &clusterTarget{addrs: f.addrs, desc: strings.Join(f.addrs, ",")}
		ct.procs, ct.cpuNote = serverProcs(f.addrs, f.pids)
		var err error
		if ct.dialOpts, err = f.creds.dialOptions(); err != nil {
			return usageError(err)
		}
		ct.gatewayOpts = ct.dialOpts // --api embedded: the given token needs the lease scope
		ct.metricsTok = f.creds.httpToken()
		if ct.metrics, err = metricsAddrs(ctx, f.addrs, ct.dialOpts); err != nil {
			ct.metricsNote = err.Error()
			disp.Printf("no server-side latency: %v\n", err)
		}
	}
	addrs, dialOpts := ct.addrs, ct.dialOpts
	procs, cpuNote, metrics, metricsNote, metricsTok := ct.procs, ct.cpuNote, ct.metrics, ct.metricsNote, ct.metricsTok
	targetDes := ct.desc

	drivers := func(addrs []string, mode string) (*quoratedriver.Driver, error) {
		return quoratedriver.Open(addrs, quoratedriver.Options{Mode: mode, API: f.api, StreamsPerNode: f.streams})
	}
	r := &suite.Runner{
		Quorate: func(mode string) (*bench.Target, error) {
			return f.quorateTarget(ctx, ct, "quorate", mode)
		},
		Rounds: f.rounds,
		Warmup: f.warmup,
		Seed:   f.seed,
		Hooks: bench.Hooks{BeforeRun: func(t *bench.Target, round, rounds int, load bench.Load, live *bench.Live) func() {
			label := t.Label()
			if rounds > 1 {
				label += fmt.Sprintf(" (round %d/%d)", round, rounds)
			}
			return disp.Track(label, load, live)
		}},
		Logf: disp.Printf,
	}
	for _, b := range f.baselines {
		if b == plainBaseline {
			plain, err := a.launchLocal(ctx, disp, f.local, nil, "plain ")
			if err != nil {
				return err
			}
			defer plain.close()
			targetDes += fmt.Sprintf(" with %s; plain: one of %d nodes without them", strings.Join(f.nodeArgs, " "), f.local)
			r.Baselines = append(r.Baselines, func(s suite.Scenario) (*bench.Target, error) {
				return f.quorateTarget(ctx, plain, plainBaseline, s.Mode)
			})
			continue
		}
		if b == nativeBaseline {
			r.Baselines = append(r.Baselines, func(s suite.Scenario) (*bench.Target, error) {
				d, err := quoratedriver.NewRouted(ctx, addrs, quoratedriver.Options{Mode: s.Mode, API: quoratedriver.APIUnary, DialOptions: dialOpts}, f.route)
				if err != nil {
					return nil, err
				}
				return &bench.Target{Name: "native", Mode: s.Mode, API: quoratedriver.APIUnary, Addrs: addrs, Driver: d, Procs: procs, CPUNote: cpuNote, Metrics: metrics, MetricsNote: metricsNote, MetricsToken: metricsTok}, nil
			})
			continue
		}
		if b == noopBaseline {
			exe, err := os.Executable()
			if err != nil {
				return failure(fmt.Errorf("bench: finding this binary to start the noop baseline: %w", err))
			}
			noop, err := noopserver.Start(ctx, exe)
			if err != nil {
				return failure(fmt.Errorf("bench: baseline: %w", err))
			}
			defer noop.Stop()
			disp.Printf("noop baseline listening on %s (pid %d)\n", noop.Addr, noop.PID)
			noopProcs := []proccpu.Process{{Name: "noop-server:" + strconv.Itoa(noop.PID), PID: noop.PID}}
			r.Baselines = append(r.Baselines, func(s suite.Scenario) (*bench.Target, error) {
				d, err := drivers([]string{noop.Addr}, s.Mode)
				if err != nil {
					return nil, failure(fmt.Errorf("bench: baseline: %w", err))
				}
				return &bench.Target{Name: "noop", Mode: "allow", API: f.api, Addrs: []string{noop.Addr}, Driver: d,
					Procs: noopProcs, NoAccuracy: "the noop baseline allows every check"}, nil
			})
			continue
		}
		baselineProcs, baselineNote := baselineServer(b)
		r.Baselines = append(r.Baselines, func(s suite.Scenario) (*bench.Target, error) {
			if err := redisdriver.Supports(s.Workload.Limit); err != nil {
				return nil, fmt.Errorf("%w: %v", suite.ErrUnsupported, err)
			}
			// One connection per client, and a few spare for the warmup's
			// stragglers.
			d, err := redisdriver.New(ctx, b, s.Load.Concurrency+4)
			if err != nil {
				return nil, failure(fmt.Errorf("bench: baseline: %w", err))
			}
			return &bench.Target{Name: "redis", Mode: "lua", Addrs: []string{b}, Driver: d,
				Procs: baselineProcs, CPUNote: baselineNote}, nil
		})
	}
	if len(r.Baselines) > 0 && r.Rounds == 0 {
		r.Rounds = 2
	}

	var scenarios []suite.Scenario
	if f.suite != "" {
		d := time.Duration(0)
		if cmd.Flags().Changed("duration") {
			d = f.duration
		}
		scenarios = suite.Standard(d)
		r.Preflight = true
	} else {
		scenarios = []suite.Scenario{f.scenario()}
	}

	comps, runErr := r.Run(ctx, scenarios)
	var ee *exitError
	if errors.As(runErr, &ee) {
		return runErr
	}
	if runErr != nil && len(comps) == 0 {
		return failure(fmt.Errorf("bench: %w", runErr))
	}
	if err := a.benchReport(f, comps, suite.Report{
		Suite: f.suite, StartedAt: started, Version: versionString(), Machine: suite.ThisMachine(),
		Target: targetDes, Scenarios: comps,
	}); err != nil {
		return failure(err)
	}
	switch {
	case runErr != nil:
		return failure(fmt.Errorf("bench: %w", runErr))
	case ctx.Err() != nil:
		return failure(errors.New("bench: interrupted; the results above are partial"))
	}
	for _, c := range comps {
		for _, run := range c.Runs {
			if run.AllFailed() {
				return failure(fmt.Errorf("bench: %s: every request to %s failed: %s", c.Scenario, run.Target+" "+run.Mode, errorSummary(run)))
			}
			if run.Requests == 0 {
				return failure(fmt.Errorf("bench: %s: no request to %s completed", c.Scenario, run.Target+" "+run.Mode))
			}
		}
	}
	return nil
}

// clusterTarget is what the targets of a run need of the cluster they
// measure.
type clusterTarget struct {
	addrs       []string
	desc        string
	procs       []proccpu.Process // metered for the CPU column
	cpuNote     string            // why procs is empty
	metrics     []string          // the nodes' HTTP addresses, for server-side latency
	metricsNote string            // why metrics is empty
	metricsTok  string
	dialOpts    []grpc.DialOption
	gatewayOpts []grpc.DialOption // --api embedded: a token with the lease scope
	close       func()
}

// launchLocal starts a local cluster of n agents of this binary with extra
// arguments; label names it in the progress lines ("" or "plain ").
func (a *app) launchLocal(ctx context.Context, disp *progress.Display, n int, extra []string, label string) (*clusterTarget, error) {
	started := time.Now()
	exe, err := os.Executable()
	if err != nil {
		return nil, failure(fmt.Errorf("bench: finding this binary to start the nodes: %w", err))
	}
	disp.Printf("starting a %slocal cluster of %d nodes...\n", label, n)
	c, err := localcluster.Launch(ctx, localcluster.Options{Binary: exe, Nodes: n, LogMax: 16 << 10, ExtraArgs: extra})
	if err != nil {
		return nil, failure(fmt.Errorf("bench: %w", err))
	}
	ct := &clusterTarget{addrs: c.Addrs(), desc: fmt.Sprintf("local cluster of %d nodes", n), close: func() {
		disp.Printf("stopping the %slocal cluster\n", label)
		c.Close()
	}}
	fail := func(err error) (*clusterTarget, error) {
		ct.close()
		return nil, failure(fmt.Errorf("bench: %w", err))
	}
	if ct.dialOpts, err = localcluster.DialOptions(c.Creds(), "operator"); err != nil {
		return fail(err)
	}
	if ct.gatewayOpts, err = localcluster.DialOptions(c.Creds(), "gateway"); err != nil {
		return fail(err)
	}
	ct.metricsTok, _ = c.Creds().Token("operator")
	for i := range c.Len() {
		ct.procs = append(ct.procs, proccpu.Process{Name: c.Node(i).ID, PID: c.PID(i)})
		ct.metrics = append(ct.metrics, c.Node(i).HTTP)
	}
	disp.Printf("%scluster ready in %.1fs: %s\n", label, time.Since(started).Seconds(), strings.Join(ct.addrs, ", "))
	return ct, nil
}

// quorateTarget is the run's API against ct, named name.
func (f *benchFlags) quorateTarget(ctx context.Context, ct *clusterTarget, name, mode string) (*bench.Target, error) {
	t := &bench.Target{Name: name, Mode: mode, API: f.api, Addrs: ct.addrs, Procs: ct.procs, CPUNote: ct.cpuNote,
		Metrics: ct.metrics, MetricsNote: ct.metricsNote, MetricsToken: ct.metricsTok}
	var err error
	switch f.api {
	case apiEmbedded:
		t.Driver, err = embeddeddriver.Open(ctx, ct.addrs, embeddeddriver.Options{Mode: mode, Gateways: f.gateways, DialOptions: ct.gatewayOpts})
	case apiEnvoy:
		t.Driver, err = envoydriver.Open(ct.addrs, envoydriver.Options{DialOptions: ct.dialOpts})
	default:
		t.Driver, err = quoratedriver.NewRouted(ctx, ct.addrs, quoratedriver.Options{Mode: mode, API: f.api, StreamsPerNode: f.streams, DialOptions: ct.dialOpts}, f.route)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// benchReport prints the table and writes the files the flags ask for.
func (a *app) benchReport(f *benchFlags, comps []*bench.Comparison, rep suite.Report) error {
	header := fmt.Sprintf("quorate bench %s against %s, on %d cpus\n", rep.Version, rep.Target, rep.Machine.CPUs)
	if f.suite == "" && len(comps) == 1 && len(comps[0].Runs) > 0 {
		r := comps[0].Runs[0]
		header += fmt.Sprintf("workload: %s\nload: %s\n", r.Workload, r.Load)
	}
	header += f.apiLine() + "\n"
	fmt.Fprintf(a.stdout, "\n%s\n", header)
	if err := report.Table(a.stdout, comps); err != nil {
		return err
	}
	if f.suite != "" {
		if f.json != "" {
			if err := report.WriteJSON(f.json, rep); err != nil {
				return err
			}
		}
		if f.out == "" {
			return nil
		}
		return writeSuiteDir(f.out, header, comps, rep)
	}
	if len(comps) == 0 {
		return nil
	}
	c := comps[0]
	if f.json != "" {
		// One run: the run's object itself; with a baseline: the runs and
		// the ratio.
		var v any = c
		if len(c.Runs) == 1 {
			v = c.Runs[0]
		}
		if err := report.WriteJSON(f.json, v); err != nil {
			return err
		}
	}
	if f.plot != "" {
		if err := report.Plot(f.plot, c); err != nil {
			return err
		}
	}
	return nil
}

// writeSuiteDir writes a suite's report files into dir, and points
// latest (a symlink beside dir) at it.
func writeSuiteDir(dir, header string, comps []*bench.Comparison, rep suite.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var table strings.Builder
	table.WriteString(header + "\n")
	if err := report.Table(&table, comps); err != nil {
		return err
	}
	for _, c := range comps {
		if c.Description != "" {
			fmt.Fprintf(&table, "%s: %s\n", c.Scenario, c.Description)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(table.String()), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := report.WriteJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return err
	}
	for _, c := range comps {
		if c.Skipped != "" || len(c.Runs) == 0 {
			continue
		}
		if err := report.Plot(filepath.Join(dir, safeName(c.Scenario)+".png"), c); err != nil {
			return err
		}
	}
	latest := filepath.Join(filepath.Dir(filepath.Clean(dir)), "latest")
	if fi, err := os.Lstat(latest); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		return nil // something else is called latest: leave it alone
	}
	_ = os.Remove(latest)
	_ = os.Symlink(filepath.Base(filepath.Clean(dir)), latest)
	return nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// errorSummary lists a run's errors by code with the first message of each.
func errorSummary(r *bench.RunResult) string {
	var parts []string
	for code, n := range r.ErrorsByCode {
		parts = append(parts, fmt.Sprintf("%d× %s (%s)", n, code, r.ErrorExamples[code]))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
