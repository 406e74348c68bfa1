//go:build !linux

package main

import "os/exec"

// setChildAttrs does nothing here: only Linux can tie a child's life to its
// parent's. Agents stay in dev's process group, so a Ctrl-C at the terminal
// reaches them too, but if dev is killed with SIGKILL they keep running.
func setChildAttrs(*exec.Cmd) {}
