package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := freePorts(12)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p <= 0 {
			t.Fatalf("ports %v", ports)
		}
		seen[p] = true
	}
}

// TestStartFailureCleansUp: an agent binary that exits at once makes Start
// fail with its output, and leave neither processes nor data behind.
func TestStartFailureCleansUp(t *testing.T) {
	script := filepath.Join(t.TempDir(), "agent")
	// Its own parent directory: other packages' tests make clusters in
	// os.TempDir() at the same time.
	parent := t.TempDir()
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho bad flag: \"$@\" >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Start(context.Background(), Options{Binary: script, Nodes: 2, TempDir: parent})
	if err == nil || c != nil {
		t.Fatalf("Start: %v, %v; want an error", c, err)
	}
	if !strings.Contains(err.Error(), "exited before the cluster was ready") || !strings.Contains(err.Error(), "bad flag: agent --node-id") {
		t.Errorf("error %q lacks the agent's output", err)
	}
	if after, _ := os.ReadDir(parent); len(after) > 0 {
		t.Errorf("data directory left behind: %v", after)
	}
}
