package localcluster

import (
	"os/exec"
	"syscall"
)

// setChildAttrs puts an agent in its own process group, so a Ctrl-C at the
// terminal reaches only the tool, which then stops the agents in order; and
// asks the kernel to send the agent SIGTERM if the tool dies without
// stopping it (kill -9), so no node outlives its benchmark.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
