// Package localcluster starts a throwaway quorate cluster for quorate bench
// --local: N agents of the given binary on free loopback ports, with their
// data in a temporary directory. Stop ends every agent and removes the
// directory; on Linux an agent also gets SIGTERM if the tool dies without
// stopping it, so no node outlives the benchmark.
package localcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/cluster/agentproc"
	"github.com/quorate/quorate/rpc/client"
	"github.com/quorate/quorate/security"
)

// Options configure Start.
type Options struct {
	// Binary is the quorate binary to run as "agent" (quorate bench passes
	// itself, os.Executable()).
	Binary string
	// Nodes is the number of agents, at least 1.
	Nodes int
	// Shards is the number of shard groups; 0 keeps the agent's default.
	Shards int
	// ReadyTimeout bounds the wait for every node's /readyz (default 60s).
	ReadyTimeout time.Duration
	// ExtraArgs are added to every agent's command line.
	ExtraArgs []string
	// TempDir is where the cluster's data directory is made and removed
	// again at Stop; empty means os.TempDir().
	TempDir string
}

// Node is one agent of the cluster.
type Node struct {
	ID                string
	RPC, HTTP, Gossip string
	Peer              string
	PID               int
}

// Cluster is a running local cluster.
type Cluster struct {
	Nodes []Node
	// Creds are the cluster's credentials (security.Dev): clients dial with
	// DialOptions.
	Creds security.Dev
	dir   string
	procs []*proc
}

// proc is one agent process.
type proc struct {
	*agentproc.Proc
	log *agentproc.Log
}

// Timings of the cluster's life.
const (
	defaultReadyTimeout = 60 * time.Second
	readyPoll           = 100 * time.Millisecond
	stopGrace           = 15 * time.Second
)

// Start starts the cluster and waits until every node answers /readyz with
// 200. On failure, and if ctx is cancelled meanwhile, it stops whatever it
// started and returns an error that includes the failing node's last log
// lines.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("localcluster: %d nodes: need at least 1", opts.Nodes)
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = defaultReadyTimeout
	}
	dir, err := os.MkdirTemp(opts.TempDir, "quorate-bench-")
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	c = &Cluster{dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	ports, err := freePorts(4 * opts.Nodes)
	if err != nil {
		return c, err
	}
	var ids []string
	for i := range opts.Nodes {
		c.Nodes = append(c.Nodes, Node{
			ID:     "n" + strconv.Itoa(i+1),
			RPC:    loopback(ports[4*i]),
			HTTP:   loopback(ports[4*i+1]),
			Gossip: loopback(ports[4*i+2]),
			Peer:   loopback(ports[4*i+3]),
		})
		ids = append(ids, c.Nodes[i].ID)
	}
	c.Creds = security.Dev{Dir: filepath.Join(dir, "credentials")}
	if err := c.Creds.Ensure(ids); err != nil {
		return c, fmt.Errorf("localcluster: credentials: %w", err)
	}
	for i := range c.Nodes {
		if err := c.start(i, opts); err != nil {
			return c, err
		}
	}
	return c, c.waitReady(ctx, opts.ReadyTimeout)
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// start runs node i's agent.
func (c *Cluster) start(i int, opts Options) error {
	n := &c.Nodes[i]
	layout := agentproc.Layout{Shards: opts.Shards, LogLevel: "warn", Credentials: c.Creds.Dir, Extra: opts.ExtraArgs}
	for _, o := range c.Nodes {
		layout.Nodes = append(layout.Nodes, agentproc.Node{ID: o.ID, Data: filepath.Join(c.dir, o.ID), RPC: o.RPC, HTTP: o.HTTP, Gossip: o.Gossip, Peer: o.Peer})
	}
	log := &agentproc.Log{Max: 16 << 10}
	p, err := agentproc.Start(opts.Binary, layout.Args(i), agentproc.Options{Stdout: log, Stderr: log, Detach: true})
	if err != nil {
		return fmt.Errorf("localcluster: starting %s: %w", n.ID, err)
	}
	n.PID = p.PID()
	c.procs = append(c.procs, &proc{Proc: p, log: log})
	return nil
}

// waitReady polls every node's /readyz until all answer 200.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	ready := make([]bool, len(c.Nodes))
	for {
		left := 0
		for i, n := range c.Nodes {
			if p := c.procs[i]; !p.Running() {
				return fmt.Errorf("localcluster: %s exited before the cluster was ready (%s); its log:\n%s",
					n.ID, p.Exit(), p.log.String())
			}
			if !ready[i] {
				ready[i] = agentproc.Ready(ctx, hc, n.HTTP)
			}
			if !ready[i] {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for i, n := range c.Nodes {
				if !ready[i] {
					return fmt.Errorf("localcluster: %s not ready after %v; its log:\n%s", n.ID, timeout, c.procs[i].log.String())
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localcluster: waiting for the cluster: %w", ctx.Err())
		case <-time.After(readyPoll):
		}
	}
}

// DialOptions are what a client of the cluster dials with: TLS trusting
// its CA and the operator token (every scope).
func (c *Cluster) DialOptions() ([]grpc.DialOption, error) {
	ca, err := client.WithCAFile(c.Creds.CA())
	if err != nil {
		return nil, err
	}
	tok, err := c.Creds.Token("operator")
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{ca, client.WithToken(tok)}, nil
}

// Addrs returns the nodes' gRPC addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.RPC
	}
	return out
}

// Stop sends SIGTERM to every agent, kills those still running after 15s,
// waits for all of them, and removes the data directory. It is safe to call
// more than once.
func (c *Cluster) Stop() {
	procs := make([]*agentproc.Proc, len(c.procs))
	for i, p := range c.procs {
		procs[i] = p.Proc
	}
	agentproc.StopAll(procs, syscall.SIGTERM, stopGrace, nil)
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// Logs returns the last lines each node wrote, for diagnosing a failed run.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for i, n := range c.Nodes {
		if i < len(c.procs) {
			fmt.Fprintf(&b, "--- %s (pid %d)\n%s", n.ID, n.PID, c.procs[i].log.String())
		}
	}
	return b.String()
}

// freePorts returns n distinct loopback ports that are free now, for TCP
// and, since gossip also uses UDP, for UDP. Another process may take one
// before the agent binds it; Start then fails with that agent's log.
func freePorts(n int) ([]int, error) {
	var ports []int
	var hold []io.Closer
	defer func() {
		for _, h := range hold {
			h.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("localcluster: finding free ports: %w", err)
		}
		// Holding every listener until all are chosen keeps the ports
		// distinct.
		hold = append(hold, l)
		port := l.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", loopback(port))
		if err != nil {
			continue // UDP side taken: try another
		}
		hold = append(hold, pc)
		ports = append(ports, port)
	}
	return ports, nil
}
