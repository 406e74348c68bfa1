package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quorate/quorate/chaos/check"
	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Config describes one run.
type Config struct {
	Binary        string        // the quorate executable the agents run
	Nodes         int           // 3 or 5
	Duration      time.Duration // how long the workload runs under faults
	Seed          uint64        // decides the schedule of faults and the clients' choices
	FaultInterval time.Duration // mean quiet time between faults
	Out           string        // results folder: report, visualizations, agents' data and logs

	// Zero values take the defaults.
	Shards        int           // shard groups, default 8
	CheckTimeout  time.Duration // bound of each linearizability search, default 60s
	StrictClients int           // default 6
	LeasedClients int           // default one per node
	// LeasedPause is the longest pause between a leased client's checks
	// (uniform in [0, LeasedPause)), default 2ms. Tests raise it to leave
	// CPU to other tests running in parallel.
	LeasedPause time.Duration
	Progress    io.Writer // progress lines; default none
}

// Validate checks the configuration; errors name the flag at fault.
func (c *Config) Validate() error {
	switch {
	case c.Nodes != 3 && c.Nodes != 5:
		return fmt.Errorf("--nodes %d: must be 3 or 5", c.Nodes)
	case c.Duration <= 0:
		return fmt.Errorf("--duration %s: must be positive", c.Duration)
	case c.FaultInterval <= 0:
		return fmt.Errorf("--fault-interval %s: must be positive", c.FaultInterval)
	case c.Binary == "":
		return errors.New("--binary: the quorate executable is required")
	case c.Out == "":
		return errors.New("--out: a results folder is required")
	}
	if _, err := os.Stat(c.Binary); err != nil {
		return fmt.Errorf("--binary %s: %w", c.Binary, err)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Shards == 0 {
		c.Shards = 8
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = 5 * time.Minute
	}
	if c.StrictClients == 0 {
		c.StrictClients = 6
	}
	if c.LeasedClients == 0 {
		c.LeasedClients = c.Nodes
	}
	if c.LeasedPause == 0 {
		c.LeasedPause = 2 * time.Millisecond
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// ReplayCommand is the command that runs the same schedule again.
func (c *Config) ReplayCommand() string {
	return fmt.Sprintf("%s chaos --seed %d --duration %s --nodes %d --fault-interval %s",
		c.Binary, c.Seed, c.Duration, c.Nodes, c.FaultInterval)
}

// Run starts a cluster in cfg.Out, runs the workload under the nemesis for
// cfg.Duration, restarts the whole cluster, checks what was recorded, and
// writes the report. Whatever happens (error, panic, ctx cancelled by a
// signal) it kills every agent it started and deletes its nftables table
// before it returns. A run that completes returns its report, violations
// or not; an error means the run could not be completed.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	lg := func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "chaos: "+format+"\n", args...)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	r := &Report{Seed: cfg.Seed, Duration: cfg.Duration, Nodes: cfg.Nodes, Partitions: "enabled", Replay: cfg.ReplayCommand()}
	fw, ferr := newFirewall()
	if ferr != nil {
		r.Partitions = fmt.Sprintf("nftables unavailable (%v): partitions disabled", ferr)
		lg("%s", r.Partitions)
	}
	defer func() {
		if cerr := fw.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("chaos: deleting nftables table %s: %w", fw.table, cerr))
		}
	}()
	c, err := newCluster(cfg.Binary, cfg.Out, cfg.Nodes, cfg.Shards, cfg.Seed)
	if err != nil {
		return nil, err
	}
	defer c.killAll()
	r.Addresses = c.ips()
	if err := startAll(ctx, c); err != nil {
		return nil, err
	}
	lg("%d nodes ready at %v; seed %d; results in %s", cfg.Nodes, r.Addresses, cfg.Seed, cfg.Out)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &guard{cancel: cancel}
	w := newWorkload(c, cfg.Seed, fmt.Sprintf("%d-%d", cfg.Seed, time.Now().UnixNano()), g)
	w.leasedPause = cfg.LeasedPause
	nem := &nemesis{c: c, fw: fw, lg: lg, keyShard: w.keyShard}
	err = runFaults(ctx, &cfg, r, w, nem, g)
	g.repanic()
	if err != nil {
		return nil, err
	}
	r.Faults = nem.history()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("chaos: interrupted: %w", ctx.Err())
	}
	before := make([][]check.Operation, len(w.strict))
	for i, k := range w.strict {
		before[i] = k.rec.History()
	}
	r.Durability = durability(ctx, c, w, lg)
	lg("checking histories")
	r.check(&cfg, w, before)
	r.judge()
	return r, r.write(cfg.Out)
}

// startAll starts every node and waits until all are ready.
func startAll(ctx context.Context, c *cluster) error {
	for i := range c.agents {
		if err := c.start(i); err != nil {
			return err
		}
	}
	return c.waitReady(ctx, 60*time.Second, c.all()...)
}

// runFaults runs the workload for the configured duration with the nemesis
// injecting faults meanwhile. The schedule leaves the last part of the run
// (a sixth, at most 10s) without faults, so that the run ends healed.
func runFaults(ctx context.Context, cfg *Config, r *Report, w *workload, nem *nemesis, g *guard) error {
	quiet := min(10*time.Second, cfg.Duration/6)
	schedule := plan(cfg.Seed, cfg.Nodes, cfg.Shards, cfg.Duration-quiet, cfg.FaultInterval)
	wctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	r.Start = time.Now()
	var nerr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer g.catch()
		nerr = nem.run(wctx, schedule, r.Start.Add(cfg.Duration-quiet))
	})
	w.run(wctx, cfg.StrictClients, cfg.LeasedClients)
	wg.Wait()
	r.End = time.Now()
	for _, k := range w.strict {
		for _, op := range k.rec.History() {
			r.StrictOps++
			if op.Outcome == check.Unknown {
				r.StrictUnknown++
			}
		}
	}
	for _, k := range w.leased {
		k.mu.Lock()
		r.LeasedOps += len(k.allows) + k.denied + k.unavailable + k.unknown
		r.LeasedFailed += k.unknown
		k.mu.Unlock()
	}
	w.fill.mu.Lock()
	r.FillerOps, r.FillerDecided, r.FillerMisfit, r.FirstMisfit = w.fill.ops, w.fill.decided, w.fill.misfit, w.fill.firstMisfit
	w.fill.mu.Unlock()
	r.Entries, r.SharedEntries, r.CheckedShared = w.entries.shared()
	r.StrictGap, r.StrictGapAt = longestGap(w.ok[pb.Mode_MODE_STRICT], r.Start, r.End)
	r.LeasedGap, r.LeasedGapAt = longestGap(w.ok[pb.Mode_MODE_LEASED], r.Start, r.End)
	return nerr
}

// durability kills every node at once, restarts the cluster on its data,
// and then makes one strict check per strict key, appended to its history:
// a drained long-period key must still be drained. It returns "checked",
// or why it could not check.
func durability(ctx context.Context, c *cluster, w *workload, lg func(string, ...any)) string {
	lg("durability: kill -9 all nodes, restart on the same data")
	c.killAll()
	if err := startAll(ctx, c); err != nil {
		return "not checked: " + err.Error()
	}
	clients := make([]*client.Client, len(c.agents))
	for i, a := range c.agents {
		cl, err := client.Dial(a.rpc(), c.dialOpts...)
		if err != nil {
			return "not checked: " + err.Error()
		}
		defer cl.Close()
		clients[i] = cl
	}
	const id = 1 << 10 // a client id of its own, for the visualization
	for _, k := range w.strict {
		deadline := time.Now().Add(30 * time.Second)
		for attempt := 0; ; attempt++ {
			op := k.rec.Invoke(id, 1, time.Now())
			out, at, index, sh, _ := strictCheck(ctx, clients[attempt%len(clients)], k, 1)
			k.rec.Complete(op, time.Now(), out, at, index, int(sh))
			if out != check.Unknown {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Sprintf("not checked: %s undecided for 30s after the restart", k.name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return "checked"
}

// check runs the checkers over the recorded histories. before holds each
// strict key's history without the check made after the full restart.
func (r *Report) check(cfg *Config, w *workload, before [][]check.Operation) {
	r.Strict = make([]StrictKeyReport, len(w.strict))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, k := range w.strict {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r.Strict[i] = checkStrict(cfg, k, before[i], r.Durability == "checked")
		})
	}
	wg.Wait()
	slack := skewSlack(r.Faults)
	for _, k := range w.leased {
		r.Leased = append(r.Leased, checkLeased(k, r.End, slack))
	}
}

// checkStrict judges one strict key: admission and linearizability of the
// workload's history, then linearizability with the post-restart check.
func checkStrict(cfg *Config, k *strictKey, before []check.Operation, restarted bool) StrictKeyReport {
	start := time.Now()
	kr := StrictKeyReport{Key: k.name, Limit: k.limit, Ops: len(before), Admission: check.CheckAdmission(k.limit, before),
		Durable: "not checked", Shards: decidingShards(before)}
	var info porcupine.LinearizationInfo
	kr.Linearizable, info = linearizable(k.limit, before, cfg.CheckTimeout)
	if kr.Linearizable == "ok" && restarted {
		kr.Durable, info = linearizable(k.limit, k.rec.History(), cfg.CheckTimeout)
	}
	if kr.Linearizable == "VIOLATION" || kr.Durable == "VIOLATION" {
		kr.Visualization = filepath.Join(cfg.Out, k.name+".html")
		if err := check.Visualize(k.limit, info, kr.Visualization); err != nil {
			kr.Visualization = "visualization failed: " + err.Error()
		}
	}
	kr.CheckTime = time.Since(start).Round(time.Millisecond).String()
	kr.History = filepath.Join(cfg.Out, "history-"+k.name+".json")
	if js, err := json.Marshal(k.rec.History()); err != nil || os.WriteFile(kr.History, js, 0o644) != nil {
		kr.History = "not written"
	}
	return kr
}

// skewSlack returns, for a time t, the largest forward clock offset
// injected at or before t.
func skewSlack(faults []Fault) func(int64) int64 {
	return func(t int64) int64 {
		var s int64
		for _, f := range faults {
			if f.Kind == ClockSkew && f.Offset > 0 && f.Start.UnixNano() <= t {
				s = max(s, int64(f.Offset))
			}
		}
		return s
	}
}

// guard carries a panic out of the harness's goroutines. A panic that
// ended the process from another goroutine would skip Run's deferred
// cleanup and leave agents running and the nftables table in place; caught
// here, it cancels the run and is raised again in Run's goroutine, so the
// cleanup runs first.
type guard struct {
	cancel context.CancelFunc

	mu    sync.Mutex
	panic any // guarded by mu: the first panic caught
}

// catch must be deferred directly by a goroutine.
func (g *guard) catch() {
	if p := recover(); p != nil {
		g.mu.Lock()
		if g.panic == nil {
			g.panic = p
		}
		g.mu.Unlock()
		g.cancel()
	}
}

// repanic raises the panic caught, if any.
func (g *guard) repanic() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.panic != nil {
		panic(g.panic)
	}
}

// decidingShards lists the shards that decided ops, in the order of their
// first decision.
func decidingShards(ops []check.Operation) []int {
	var out []int
	seen := map[int]bool{}
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b check.Operation) int { return cmp.Compare(a.DecidedAt, b.DecidedAt) })
	for _, op := range sorted {
		if op.Index != 0 && !seen[op.Shard] {
			seen[op.Shard] = true
			out = append(out, op.Shard)
		}
	}
	return out
}
