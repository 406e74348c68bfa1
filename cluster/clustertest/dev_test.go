package clustertest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// freeRange finds n consecutive loopback ports free for TCP and UDP.
func freeRange(t *testing.T, n int, avoid map[int]bool) int {
	t.Helper()
	for try := 0; try < 200; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := base+n < 65535
		for p := base; ok && p < base+n; p++ {
			if avoid[p] {
				ok = false
				break
			}
			tl, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				break
			}
			ul, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
			tl.Close()
			if err != nil {
				ok = false
				break
			}
			ul.Close()
		}
		if ok {
			for p := base; p < base+n; p++ {
				avoid[p] = true
			}
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// TestDevCluster: `quorate dev` starts three nodes, serves a check, and on
// Ctrl-C stops them all, leaving no process behind.
func TestDevCluster(t *testing.T) {
	used := map[int]bool{}
	rpc, http, gossip, peer := freeRange(t, 3, used), freeRange(t, 3, used), freeRange(t, 3, used), freeRange(t, 3, used)
	cmd := exec.Command(clustertest.Binary(t), "dev", "--nodes", "3", "--data", t.TempDir(),
		"--base-rpc", strconv.Itoa(rpc), "--base-http", strconv.Itoa(http), "--base-gossip", strconv.Itoa(gossip),
		"--base-peer", strconv.Itoa(peer))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // the test only needs the start of the output
			}
		}
		_, _ = io.Copy(io.Discard, out)
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()

	// Read until the ready banner, collecting the agents' PIDs from its table
	// and the environment it tells users to export.
	var pids []int
	var env []string
	deadline := time.After(90 * time.Second)
	for ready := false; !ready; {
		select {
		case l := <-lines:
			f := strings.Fields(l)
			if e, ok := strings.CutPrefix(strings.TrimSpace(l), "export "); ok {
				env = append(env, e)
			}
			if len(f) == 7 && strings.HasPrefix(f[0], "n") && strings.HasPrefix(f[1], "127.0.0.1:") {
				pid, err := strconv.Atoi(f[5])
				if err == nil {
					pids = append(pids, pid)
				}
			}
			ready = strings.Contains(l, "Ctrl-C stops the cluster")
		case err := <-exited:
			t.Fatalf("quorate dev exited before ready: %v", err)
		case <-deadline:
			t.Fatal("quorate dev not ready after 90s")
		}
	}
	if len(pids) != 3 {
		t.Fatalf("dev printed %d agent PIDs, want 3", len(pids))
	}

	// The CLI, with the environment dev printed, reaches the secured cluster.
	check := exec.Command(clustertest.Binary(t), "check", "--addr", fmt.Sprintf("127.0.0.1:%d", rpc),
		"--name", "api", "--key", "user:42", "--limit", "100", "--period", "1m", "--fail", "closed")
	check.Env = append(check.Environ(), env...)
	if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), "remaining    99") {
		t.Fatalf("quorate check with dev's environment %q: %v\n%s", env, err, out)
	}
	// Without credentials the same call is refused: TLS and a token are needed.
	cl, err := client.Dial(fmt.Sprintf("127.0.0.1:%d", rpc))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := cl.Check(ctx, &pb.CheckRequest{Items: []*pb.Item{clustertest.Item("api", "user:42", 100, time.Minute)}}); err == nil {
		t.Fatalf("a plaintext check without a token was answered: %v", resp)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("quorate dev exited with %v after Ctrl-C, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("quorate dev did not stop within 30s of Ctrl-C")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("agent pid %d still running after dev stopped", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
