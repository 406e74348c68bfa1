package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/localcluster"
	"github.com/quorate/quorate/security"
)

// Ports every node uses on its own loopback address. With one address per
// node they need not be free-picked; 127.0.0.1 is never used.
const (
	gossipPort = 17300
	rpcPort    = 17400
	httpPort   = 17500
	peerPort   = 17600
)

// agent is one node of the run: its own loopback address (so that
// nftables can cut it off), data and log file.
type agent struct {
	id   string
	ip   string
	data string
	log  string // file the agent's output is appended to
}

func (a *agent) rpc() string    { return net.JoinHostPort(a.ip, fmt.Sprint(rpcPort)) }
func (a *agent) http() string   { return net.JoinHostPort(a.ip, fmt.Sprint(httpPort)) }
func (a *agent) gossip() string { return net.JoinHostPort(a.ip, fmt.Sprint(gossipPort)) }
func (a *agent) peer() string   { return net.JoinHostPort(a.ip, fmt.Sprint(peerPort)) }

func (a *agent) node() localcluster.Node {
	return localcluster.Node{ID: a.id, Data: a.data, RPC: a.rpc(), HTTP: a.http(), Gossip: a.gossip(), Peer: a.peer()}
}

// cluster is the set of agents of one run, run by a localcluster.Cluster
// (which signals only the processes it started, by PID). agents are its
// nodes 0..n-1, the ones the workload calls; a membership fault's spare is
// added after them.
type cluster struct {
	bin    string
	agents []*agent
	creds  security.Dev
	// dialOpts are the clients' TLS and operator token.
	dialOpts []grpc.DialOption
	lc       *localcluster.Cluster

	mu sync.Mutex
	// spare is the node a membership fault adds and removes (membership.go),
	// and spareIdx its index in lc; nil until then. Guarded by mu.
	spare    *agent
	spareIdx int
}

// addressBlock picks the per-run block 127.a.b.0/24 from the seed and the
// process id, avoiding 127.0.0.0/16 (127.0.0.1 is everybody's).
func addressBlock(seed uint64, pid int) (a, b int) {
	h := seed*0x9E3779B97F4A7C15 ^ uint64(pid)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	return 100 + int(h%100), int((h >> 8) % 256)
}

func newCluster(bin, dir string, n, shards int, seed uint64) (*cluster, error) {
	// Two runs sharing a folder would share the agents' data directories.
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		return nil, fmt.Errorf("--out %s: already holds a run (%s exists); choose a new folder", dir, filepath.Join(dir, "data"))
	}
	a, b := addressBlock(seed, os.Getpid())
	c := &cluster{bin: bin}
	var nodes []localcluster.Node
	for i := range n {
		ag := &agent{id: fmt.Sprintf("n%d", i+1), ip: fmt.Sprintf("127.%d.%d.%d", a, b, i+2),
			data: filepath.Join(dir, "data", fmt.Sprintf("n%d", i+1)),
			log:  filepath.Join(dir, "logs", fmt.Sprintf("n%d.log", i+1))}
		c.agents = append(c.agents, ag)
		nodes = append(nodes, ag.node())
	}
	// Fail early, with a clear error, if another process holds a port.
	if busy := localcluster.Busy(nodes); len(busy) > 0 {
		return nil, fmt.Errorf("chaos: addresses not free:\n  %s", strings.Join(busy, "\n  "))
	}
	for _, d := range []string{filepath.Join(dir, "data"), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	if err := c.makeCreds(filepath.Join(dir, "credentials")); err != nil {
		return nil, fmt.Errorf("chaos: credentials: %w", err)
	}
	c.lc = localcluster.New(localcluster.Config{
		Binary: bin,
		Layout: localcluster.Layout{Nodes: nodes, Shards: shards, LogLevel: "info", Credentials: c.creds.Dir,
			Extra: []string{"--dead-node-grace", deadNodeGrace.String()}},
		Output: c.output,
		// The files hold it all; this is for errors.
		LogMax: 16 << 10,
	})
	return c, nil
}

// output appends an agent's output to its log file, after a line saying
// how it was started.
func (c *cluster) output(id string, args []string) (localcluster.Output, error) {
	c.mu.Lock()
	var a *agent
	for _, o := range append(slices.Clone(c.agents), c.spare) {
		if o != nil && o.id == id {
			a = o
		}
	}
	c.mu.Unlock()
	if a == nil {
		return localcluster.Output{}, fmt.Errorf("chaos: no agent %s", id)
	}
	f, err := os.OpenFile(a.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return localcluster.Output{}, fmt.Errorf("chaos: %w", err)
	}
	fmt.Fprintf(f, "=== chaos: %s start: %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), c.bin, strings.Join(args, " "))
	return localcluster.Output{Stdout: f, Stderr: f, OnExit: func() { f.Close() }}, nil
}

// makeCreds makes the cluster's credentials (certificates valid for the
// nodes' own addresses) and the clients' dial options.
func (c *cluster) makeCreds(dir string) error {
	var ids []string
	for _, a := range c.agents {
		ids = append(ids, a.id)
	}
	c.creds = security.Dev{Dir: dir, Hosts: c.ips()}
	if err := c.creds.Ensure(ids); err != nil {
		return err
	}
	var err error
	c.dialOpts, err = localcluster.DialOptions(c.creds, "operator")
	return err
}

// ips returns every node's address, in node order.
func (c *cluster) ips() []string {
	out := make([]string, len(c.agents))
	for i, a := range c.agents {
		out[i] = a.ip
	}
	return out
}

// start starts node i (which must not be running) with its data directory.
func (c *cluster) start(i int) error { return c.lc.Start(i) }

// kill sends SIGKILL to node i, if running, and waits for it to exit.
func (c *cluster) kill(i int) { c.lc.Kill(i) }

// pause sends SIGSTOP to node i; resume sends SIGCONT.
func (c *cluster) pause(i int) error  { return c.lc.Pause(i) }
func (c *cluster) resume(i int) error { return c.lc.Resume(i) }

// killAll kills every node, the spare too; it is the harness's last word on
// its processes.
func (c *cluster) killAll() { c.lc.KillAll() }

// setClockOffset sets the --debug-clock-offset node i gets at its next start.
func (c *cluster) setClockOffset(i int, d time.Duration) {
	if d == 0 {
		c.lc.SetExtra(i)
		return
	}
	c.lc.SetExtra(i, "--debug-clock-offset", d.String())
}

// waitReady waits until every node in idx is ready, failing if one exits.
func (c *cluster) waitReady(ctx context.Context, timeout time.Duration, idx ...int) error {
	err := c.lc.WaitReady(ctx, timeout, idx...)
	var exited *localcluster.ExitedError
	var notReady *localcluster.NotReadyError
	switch {
	case errors.As(err, &exited):
		return fmt.Errorf("chaos: %s exited while starting; see %s", exited.ID, c.logOf(exited.ID))
	case errors.As(err, &notReady):
		return fmt.Errorf("chaos: %s not ready after %s; see %s", notReady.IDs[0], timeout, c.logOf(notReady.IDs[0]))
	}
	return err
}

// logOf is node id's log file.
func (c *cluster) logOf(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range append(slices.Clone(c.agents), c.spare) {
		if a != nil && a.id == id {
			return a.log
		}
	}
	return "its log"
}

func (c *cluster) all() []int {
	idx := make([]int, len(c.agents))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// up reports which of the run's own nodes (not the spare) are running and
// not paused.
func (c *cluster) up() []bool { return c.lc.Up()[:len(c.agents)] }

// errNoLeader: no node could say who leads the shard.
var errNoLeader = errors.New("chaos: shard leader unknown")

// shardLeader asks the nodes that are up, in turn, which node leads shard s.
func (c *cluster) shardLeader(ctx context.Context, s int) (int, error) {
	for i, ok := range c.up() {
		if !ok {
			continue
		}
		if l := c.askLeader(ctx, i, s); l >= 0 {
			return l, nil
		}
	}
	return -1, errNoLeader
}

func (c *cluster) askLeader(ctx context.Context, i, s int) int {
	cl, err := client.Dial(c.agents[i].rpc(), c.dialOpts...)
	if err != nil {
		return -1
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return -1
	}
	for _, sh := range st.GetShards() {
		if int(sh.GetId()) != s {
			continue
		}
		for j, a := range c.agents {
			if a.id == sh.GetLeaderId() {
				return j
			}
		}
	}
	return -1
}
