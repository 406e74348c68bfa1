// Package agentproc runs quorate agents as child processes, for the tools
// and tests that start a whole cluster on one machine: quorate dev, quorate
// bench --local, the chaos harness and the cluster tests. It lays out each
// node's command line, starts and signals the processes it started (by
// PID, never by name), and probes readiness; what each caller does with
// the output and with failures stays with the caller.
package agentproc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quorate/quorate/security"
)

// Node is one agent's identity and addresses.
type Node struct {
	ID                string
	Data              string // data directory
	RPC, HTTP, Gossip string // host:port
	Peer              string // host:port of the peer port
}

// Layout is a cluster of nodes that bootstrap together.
type Layout struct {
	Nodes []Node
	// Shards is the number of shard groups; 0 keeps the agent's default.
	Shards int
	// LogLevel of every agent; "" keeps the agent's default (info).
	LogLevel string
	// Credentials is a directory laid out by security.Dev (make it with
	// security.Dev.Ensure); every agent gets its credential flags from it.
	Credentials string
	// Extra arguments go last on every command line, so they override.
	Extra []string
}

// Args is node i's command line (without the binary): it joins every other
// node's gossip address, the cluster bootstraps once all the nodes have
// met, and shards get three replicas, or as many as there are nodes.
func (l Layout) Args(i int) []string {
	n := l.Nodes[i]
	var join []string
	for j, o := range l.Nodes {
		if j != i {
			join = append(join, o.Gossip)
		}
	}
	args := []string{"agent",
		"--node-id", n.ID,
		"--data", n.Data,
		"--rpc", n.RPC,
		"--peer", n.Peer,
		"--http", n.HTTP,
		"--gossip", n.Gossip,
		"--bootstrap-expect", strconv.Itoa(len(l.Nodes)),
		"--replicas", strconv.Itoa(min(3, len(l.Nodes))),
	}
	if l.Shards > 0 {
		args = append(args, "--shards", strconv.Itoa(l.Shards))
	}
	if l.LogLevel != "" {
		args = append(args, "--log-level", l.LogLevel)
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	if l.Credentials != "" {
		args = append(args, security.Dev{Dir: l.Credentials}.AgentArgs(n.ID)...)
	}
	return append(args, l.Extra...)
}

// Options configure Start.
type Options struct {
	Stdout, Stderr io.Writer
	// Env is added to this process's environment.
	Env []string
	// Detach puts the agent in its own process group, so a Ctrl-C at the
	// terminal reaches only the caller, which then stops its agents in
	// order; on Linux the kernel also sends the agent SIGTERM if the
	// caller dies without stopping it, so no node outlives its tool.
	Detach bool
	// OnExit, if set, runs once the process has exited and its output has
	// been copied, before Done is closed (to flush or close the output).
	OnExit func()
}

// Proc is a started agent.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // what Wait returned; read after done
}

// Start starts bin with args.
func Start(bin string, args []string, o Options) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	// A grandchild holding the output pipes open must not stall Wait.
	cmd.WaitDelay = time.Second
	if o.Detach {
		detach(cmd)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if o.OnExit != nil {
			o.OnExit()
		}
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exit says how the process ended ("exit status 0", "signal: killed");
// call it after Done is closed.
func (p *Proc) Exit() string {
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// ErrExited is returned for a signal to a process that has exited.
var ErrExited = errors.New("agentproc: process has exited")

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error {
	if !p.Running() {
		return ErrExited
	}
	return p.cmd.Process.Signal(sig)
}

// Stop sends sig and waits up to grace for the process to exit, then kills
// it. It reports whether the kill was needed.
func (p *Proc) Stop(sig os.Signal, grace time.Duration) (killed bool) {
	return StopAll([]*Proc{p}, sig, grace, nil)
}

// StopAll sends sig to every process still running and waits for all of
// them, killing those still running once grace (shared by all) is over;
// onKill, if set, is told of each before it is killed. It reports whether
// any was killed.
func StopAll(procs []*Proc, sig os.Signal, grace time.Duration, onKill func(*Proc)) (killed bool) {
	for _, p := range procs {
		_ = p.Signal(sig)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	expired := false
	for _, p := range procs {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		if !p.Running() {
			continue
		}
		if onKill != nil {
			onKill(p)
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		killed = true
	}
	return killed
}

// Ready reports whether the agent whose HTTP address is addr answers
// /readyz with 200 (every shard has a leader), within a second.
func Ready(ctx context.Context, hc *http.Client, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
