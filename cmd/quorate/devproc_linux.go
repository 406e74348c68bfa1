package main

import (
	"os/exec"
	"syscall"
)

// setChildAttrs puts an agent in its own process group, so a Ctrl-C at the
// terminal reaches only dev, which then stops the agents in order; and asks
// the kernel to send the agent SIGTERM if dev dies without stopping it
// (kill -9 of dev), so no node outlives its cluster.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
