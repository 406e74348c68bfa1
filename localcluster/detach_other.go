//go:build !linux

package localcluster

import "os/exec"

// detach does nothing here: only Linux can tie a child's life to its
// parent's. Agents stay in the caller's process group, so a Ctrl-C at the
// terminal reaches them too, but if the caller is killed with SIGKILL they
// keep running.
func detach(*exec.Cmd) {}
