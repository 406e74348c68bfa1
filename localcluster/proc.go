package localcluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// ProcOptions configure StartProc.
type ProcOptions struct {
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

// StartProc starts bin with args.
func StartProc(bin string, args []string, o ProcOptions) (*Proc, error) {
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
var ErrExited = errors.New("localcluster: process has exited")

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

// Probe asks the agent whose HTTP address is addr for /readyz, within a
// second. It reports whether the answer is 200 (every shard has a leader)
// and, if not, why: the status, or what refused the connection.
func Probe(ctx context.Context, hc *http.Client, addr string) (ready bool, why string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return false, op.Err.Error()
		}
		return false, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, resp.Status
	}
	return true, ""
}
