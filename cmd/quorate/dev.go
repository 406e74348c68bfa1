package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/localcluster"
	"github.com/quorate/quorate/security"
)

// Timings of "quorate dev".
const (
	devReadyTimeout = 60 * time.Second
	devStopGrace    = 15 * time.Second
)

// devFlags are the flags of "quorate dev".
type devFlags struct {
	nodes      int
	dataDir    string
	baseRPC    int
	baseHTTP   int
	baseGossip int
	basePeer   int
	shards     int
	logLevel   string
	policies   string
	// agent holds the arguments after "--", passed to every agent.
	agent []string
}

// devOwned are the agent flags dev sets itself, per node; given after "--"
// they would silently fight dev's own values. --replicas is not among them:
// the agent takes a flag's last value, so one given after "--" overrides
// dev's min(3, nodes).
var devOwned = map[string]string{
	"node-id": "", "data": "--data", "rpc": "--base-rpc", "http": "--base-http", "gossip": "--base-gossip",
	"join": "", "bootstrap-expect": "--nodes", "shards": "--shards", "log-level": "--log-level",
	"peer": "--base-peer", "tls-cert": "", "tls-key": "", "tls-ca": "", "tokens-file": "", "gossip-key": "", "gossip-keyring": "",
}

func (a *app) devCmd() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster of several nodes, for development and testing",
		Long: `Run a local cluster: --nodes agents of this same binary, as child processes,
on 127.0.0.1. Node i (n1, n2, ...) listens on --base-rpc+i-1, --base-http+i-1
and --base-gossip+i-1, keeps its data in <--data>/n<i>, and joins all the
others. Each node's output is printed with its id in front ("[n1] ...").

Once every node's /readyz answers 200, dev prints the nodes and example
commands. Ctrl-C (or SIGTERM) stops the cluster: each node gets SIGTERM, and
one still running after 15s is killed.

A node that dies while the cluster runs (kill -9 it, it crashes) is reported
and the others keep running, so failures can be tested; Ctrl-C still stops
the rest. Before the cluster is ready, any node exiting aborts the start,
since the cluster cannot bootstrap without all of them.

Commands typed at dev's terminal (read from its standard input) act on the
running cluster: "restart n2" brings a node back on its data and says when
it is ready again, "start", "stop", "kill", "pause" and "resume" do what
they say to one node, several, or all, "nodes" lists them, "help" tells.
SIGUSR1 to dev starts every node that is not running. Once standard input
has ended, dev stops when the last node exits.

The cluster is secured as a production one is, with credentials dev makes
once under <--data>/credentials (README "Security model"): a CA and a
certificate per node, a tokens file with an operator (check, read, admin),
app (check) and prometheus (read) token, their plain tokens in
<role>.token files (mode 0600), and a gossip keyring. quorate check,
status and bench find them there when run from the directory holding
--data; dev prints the environment other tools need.

Every port is checked before anything starts; if one is in use, dev says
which and exits with status 1.

Arguments after "--" are passed to every node's agent, to tune what dev does
not set itself (see quorate agent --help): lease and timeout settings, say,
or --replicas. They are checked as the agent would check them before any
node starts.`,
		Example: `  quorate dev --nodes 3
  quorate dev --nodes 5 --data /tmp/quorate --base-rpc 8401 --base-http 8501 --base-gossip 8301 --base-peer 8601
  quorate dev -- --lease-ttl 30s --lease-acquire-wait 50ms`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 && len(args) > 0 {
				return usageError(fmt.Errorf("unexpected argument %q: agent flags go after \"--\"", args[0]))
			}
			f.agent = args
			nodes, err := f.plan()
			if err != nil {
				return usageError(err)
			}
			if err := f.checkAgentArgs(nodes); err != nil {
				return usageError(err)
			}
			if err := checkPorts(nodes); err != nil {
				return failure(err)
			}
			exe, err := os.Executable()
			if err != nil {
				return failure(fmt.Errorf("dev: finding this binary to start the nodes: %w", err))
			}
			// SIGHUP too: a closed terminal stops the cluster cleanly.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			wd, _ := os.Getwd()
			return a.runDev(ctx, devRun{exe: exe, self: invokedAs(os.Args[0], wd), layout: f.layout(nodes), policies: f.policies})
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.IntVar(&f.nodes, "nodes", 3, "number of nodes")
	fl.StringVar(&f.dataDir, "data", "./data", "parent directory of the nodes' data directories")
	fl.IntVar(&f.baseRPC, "base-rpc", 7401, "gRPC port of n1; node i uses base+i-1")
	fl.IntVar(&f.baseHTTP, "base-http", 7501, "HTTP port of n1; node i uses base+i-1")
	fl.IntVar(&f.baseGossip, "base-gossip", 7301, "gossip port of n1; node i uses base+i-1")
	fl.IntVar(&f.basePeer, "base-peer", 7601, "peer port of n1 (forwarding and Raft, nodes only); node i uses base+i-1")
	fl.IntVar(&f.shards, "shards", 0, "number of shard groups (0: the agent's default, one per node)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level of the nodes: debug, info, warn or error")
	fl.StringVar(&f.policies, "policies", "", "policy file (YAML or JSON) to apply once the cluster is ready, if it has no policies yet (make run: examples/policies.yaml)")
	return cmd
}

// plan lays out the nodes, checking that the port ranges are valid and do
// not overlap.
func (f *devFlags) plan() ([]localcluster.Node, error) {
	if f.nodes < 1 {
		return nil, fmt.Errorf("--nodes %d: must be at least 1", f.nodes)
	}
	if f.shards < 0 {
		return nil, fmt.Errorf("--shards %d: must not be negative", f.shards)
	}
	if f.dataDir == "" {
		return nil, errors.New("--data: must not be empty")
	}
	bases := []struct {
		flag string
		port int
	}{{"--base-rpc", f.baseRPC}, {"--base-http", f.baseHTTP}, {"--base-gossip", f.baseGossip}, {"--base-peer", f.basePeer}}
	owner := make(map[int]string) // port -> the flag whose range holds it
	for _, b := range bases {
		if b.port < 1 || b.port+f.nodes-1 > 65535 {
			return nil, fmt.Errorf("%s %d: ports %d..%d must be within 1..65535", b.flag, b.port, b.port, b.port+f.nodes-1)
		}
		for i := range f.nodes {
			if other, ok := owner[b.port+i]; ok {
				return nil, fmt.Errorf("%s %d: port %d is also in the %s range; with --nodes %d the ranges must not overlap", b.flag, b.port, b.port+i, other, f.nodes)
			}
			owner[b.port+i] = b.flag
		}
	}
	nodes := make([]localcluster.Node, f.nodes)
	for i := range nodes {
		id := "n" + strconv.Itoa(i+1)
		nodes[i] = localcluster.Node{
			ID:     id,
			RPC:    loopback(f.baseRPC + i),
			HTTP:   loopback(f.baseHTTP + i),
			Gossip: loopback(f.baseGossip + i),
			Peer:   loopback(f.basePeer + i),
			Data:   filepath.Join(f.dataDir, id),
		}
	}
	return nodes, nil
}

var loopback = localcluster.Loopback

// layout is the cluster of nodes as dev starts it.
func (f *devFlags) layout(nodes []localcluster.Node) localcluster.Layout {
	return localcluster.Layout{Nodes: nodes, Shards: f.shards, LogLevel: f.logLevel, Credentials: devCreds(f.dataDir).Dir, Extra: f.agent}
}

// checkAgentArgs rejects, before any node starts, agent arguments that name
// a flag dev sets itself, or that make a node's command line one the agent
// would refuse (an unknown flag, a bad value, settings that contradict each
// other), with the agent's own message.
func (f *devFlags) checkAgentArgs(nodes []localcluster.Node) error {
	if len(f.agent) == 0 {
		return nil
	}
	const where = `agent arguments after "--"`
	var user agentFlags
	ufl := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	ufl.SetOutput(io.Discard)
	user.register(ufl)
	if err := ufl.Parse(f.agent); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return fmt.Errorf("%s: for the agent's flags, run quorate agent --help", where)
		}
		return fmt.Errorf("%s: %w", where, err)
	}
	if rest := ufl.Args(); len(rest) > 0 {
		return fmt.Errorf("%s: unexpected argument %q", where, rest[0])
	}
	var err error
	ufl.Visit(func(fl *pflag.Flag) {
		own, ok := devOwned[fl.Name]
		switch {
		case err != nil || !ok:
		case own == "":
			err = fmt.Errorf("%s: --%s is set by dev for each node", where, fl.Name)
		default:
			err = fmt.Errorf("%s: --%s is set by dev for each node; use dev's %s", where, fl.Name, own)
		}
	})
	if err != nil {
		return err
	}
	// The whole command line of one node, as its agent will see it.
	var node agentFlags
	nfl := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	nfl.SetOutput(io.Discard)
	node.register(nfl)
	if err := nfl.Parse(f.layout(nodes).Args(0)[1:]); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if _, err := node.config(io.Discard); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

// checkPorts fails if any node's port cannot be listened on now: TCP for
// every address, UDP too for gossip. It names every port at fault.
func checkPorts(nodes []localcluster.Node) error {
	if bad := localcluster.Busy(nodes); len(bad) > 0 {
		return fmt.Errorf("dev: ports not available (another cluster running? stop it, or move with --base-rpc, --base-http, --base-gossip, --base-peer):\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// devRun is one run of quorate dev.
type devRun struct {
	exe    string // the binary every node runs
	self   string // how the user runs this binary, for the commands dev prints
	layout localcluster.Layout
	// policies is a policy file to apply once the cluster is ready.
	policies string
}

// runDev starts the cluster layout, waits for it to be ready, prints how to
// use it, and runs until ctx is cancelled, taking commands from a.stdin
// (localcluster.Console); then it stops every agent.
func (a *app) runDev(ctx context.Context, r devRun) error {
	var mu sync.Mutex // serializes whole lines to the terminal
	out := &lockedWriter{mu: &mu, w: a.stdout}
	errOut := &lockedWriter{mu: &mu, w: a.stderr}

	layout, exe, policies := r.layout, r.exe, r.policies
	nodes := layout.Nodes
	var ids []string
	for _, n := range nodes {
		if err := os.MkdirAll(n.Data, 0o755); err != nil {
			return failure(fmt.Errorf("dev: %s: %w", n.ID, err))
		}
		ids = append(ids, n.ID)
	}
	creds := security.Dev{Dir: layout.Credentials}
	if err := creds.Ensure(ids); err != nil {
		return failure(fmt.Errorf("dev: making the cluster's credentials in %s: %w", creds.Dir, err))
	}
	c := devCluster(exe, layout, nil, &mu, a.stdout, a.stderr)
	if err := c.StartAll(); err != nil {
		devStop(c, devStopGrace, errOut)
		return failure(fmt.Errorf("dev: %w", err))
	}

	err := c.WaitReady(ctx, devReadyTimeout)
	var exited *localcluster.ExitedError
	var notReady *localcluster.NotReadyError
	switch {
	case ctx.Err() != nil:
		errOut.printf("[dev] stopping the cluster\n")
		devStop(c, devStopGrace, errOut)
		return nil
	case errors.As(err, &exited):
		devStop(c, devStopGrace, errOut)
		return failure(fmt.Errorf("dev: %s exited before the cluster was ready (%v); see its [%s] output above", exited.ID, exited.Exit, exited.ID))
	case errors.As(err, &notReady):
		devStop(c, devStopGrace, errOut)
		var lines []string
		for k, id := range notReady.IDs {
			lines = append(lines, fmt.Sprintf("  %s: %s", id, notReady.Why[k]))
		}
		return failure(fmt.Errorf("dev: not ready after %v (GET /readyz):\n%s", devReadyTimeout, strings.Join(lines, "\n")))
	case err != nil:
		devStop(c, devStopGrace, errOut)
		return failure(fmt.Errorf("dev: %w", err))
	}

	if policies != "" {
		msg, err := loadDevPolicies(ctx, nodes[0].RPC, policies, creds)
		if err != nil {
			devStop(c, devStopGrace, errOut)
			return failure(err)
		}
		out.printf("[dev] %s\n", msg)
	}
	printDevReady(out, c, creds, r.self)
	if err := a.devConsole(ctx, c, errOut); err != nil {
		return err
	}
	errOut.printf("[dev] stopping the cluster (SIGTERM, then SIGKILL after %v)\n", devStopGrace)
	devStop(c, devStopGrace, errOut)
	errOut.printf("[dev] cluster stopped\n")
	return nil
}

// devConsole reports nodes that exit and runs the commands typed at dev's
// terminal (restart n2, ...) until ctx ends; SIGUSR1 starts every node that
// is not running. Once a.stdin has ended, every node exiting ends dev.
func (a *app) devConsole(ctx context.Context, c *localcluster.Cluster, errOut *lockedWriter) error {
	var lines <-chan string
	if a.stdin != nil {
		// Run in the background of a shell (make run &), reading the
		// terminal would stop dev (SIGTTIN); ignored, the read fails
		// instead and dev goes on without commands.
		signal.Ignore(syscall.SIGTTIN)
		lines = localcluster.Lines(ctx, a.stdin)
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	err := localcluster.NewConsole(c, errOut, devStopGrace).Run(ctx, lines, usr1)
	if errors.Is(err, localcluster.ErrAllExited) {
		devStop(c, devStopGrace, errOut)
		return failure(errors.New("dev: every node has exited"))
	}
	return err
}

// invokedAs is how the user runs this binary, given its os.Args[0] and the
// working directory: a name found on the PATH as it is, a path inside the
// working directory relative to it (./bin/quorate), any other path
// absolute.
func invokedAs(arg0, wd string) string {
	if !strings.Contains(arg0, "/") {
		return arg0
	}
	p := arg0
	if !filepath.IsAbs(p) && wd != "" {
		p = filepath.Join(wd, p)
	}
	if rel, err := filepath.Rel(wd, p); err == nil && wd != "" && !strings.HasPrefix(rel, "..") {
		p = "./" + rel
	}
	if strings.ContainsAny(p, " \t'\"$`\\") {
		p = "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
	}
	return p
}

// printDevReady prints the node table and what to try next, with self
// (how the user runs quorate) in the commands.
func printDevReady(w *lockedWriter, c *localcluster.Cluster, creds security.Dev, self string) {
	d := cliview.DevCluster{Self: self, Credentials: creds.Dir, Env: devEnv(creds),
		ReadTokenFile: creds.TokenFile("prometheus"), PID: os.Getpid()}
	d.ReadToken, _ = creds.Token("prometheus")
	for i := range c.Len() {
		d.Nodes, d.PIDs = append(d.Nodes, c.Node(i)), append(d.PIDs, c.PID(i))
	}
	var b strings.Builder
	cliview.DevReady(&b, d)
	w.printf("%s", b.String())
}
