//go:build !linux

package localcluster

import "os/exec"

// setChildAttrs does nothing here: only Linux can tie a child's life to its
// parent's. Agents stay in the tool's process group, so a Ctrl-C at the
// terminal reaches them too.
func setChildAttrs(*exec.Cmd) {}
