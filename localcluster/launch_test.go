package localcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := FreePorts(12)
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
	// Where the kernel has an ephemeral range with room below it, no port
	// is in it: a node restarted on its ports would find one taken as an
	// outgoing connection's source port.
	if lo, hi, ok := belowEphemeral(); ok {
		for _, p := range ports {
			if p < lo || p >= hi {
				t.Errorf("port %d outside [%d, %d), below the ephemeral range", p, lo, hi)
			}
		}
	}
}

// TestLaunchFailureCleansUp: an agent binary that exits at once makes Launch
// fail with its output, and leave neither processes nor data behind.
func TestLaunchFailureCleansUp(t *testing.T) {
	script := filepath.Join(t.TempDir(), "agent")
	// Its own parent directory: other packages' tests make clusters in
	// os.TempDir() at the same time.
	parent := t.TempDir()
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho bad flag: \"$@\" >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Launch(context.Background(), Options{Binary: script, Nodes: 2, TempDir: parent})
	if err == nil || c != nil {
		t.Fatalf("Launch: %v, %v; want an error", c, err)
	}
	if !errors.As(err, new(*ExitedError)) || !strings.Contains(err.Error(), "exited before the cluster was ready") || !strings.Contains(err.Error(), "bad flag: agent --node-id") {
		t.Errorf("error %q lacks the agent's output", err)
	}
	if after, _ := os.ReadDir(parent); len(after) > 0 {
		t.Errorf("data directory left behind: %v", after)
	}
}

// TestLaunch starts fake agents on free ports, with credentials, and Close
// stops them and removes the directory.
func TestLaunch(t *testing.T) {
	t.Setenv(modeEnv, "agent")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	parent := t.TempDir()
	c, err := Launch(context.Background(), Options{Binary: os.Args[0], Nodes: 2, Shards: 4, TempDir: parent, ExtraArgs: []string{"--lease-ttl", "30s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := DialOptions(c.Creds(), "operator"); err != nil {
		t.Errorf("DialOptions: %v", err)
	}
	args := strings.Join(c.Args(1), " ")
	for _, want := range []string{"--node-id n2", "--bootstrap-expect 2", "--shards 4", "--log-level warn", "--join " + c.Node(0).Gossip, "--tls-cert " + filepath.Join(c.Dir(), "credentials", "n2.crt"), "--lease-ttl 30s"} {
		if !strings.Contains(args, want) {
			t.Errorf("n2's command line %q lacks %q", args, want)
		}
	}
	if len(c.Addrs()) != 2 || c.PID(0) == 0 || !strings.Contains(c.Logs(), "--- n2 (pid ") {
		t.Errorf("addrs %v, pid %d, logs %q", c.Addrs(), c.PID(0), c.Logs())
	}
	c.Close()
	if c.Running(0) || c.Running(1) {
		t.Error("an agent runs after Close")
	}
	if after, _ := os.ReadDir(parent); len(after) > 0 {
		t.Errorf("directory left behind: %v", after)
	}
}
