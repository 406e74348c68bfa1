package raftlog

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

const (
	crashEnv         = "RAFTLOG_CRASH_CHILD"
	crashMidWriteEnv = "RAFTLOG_CRASH_MID_WRITE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

var crashGroups = []string{"meta", "shard-0", "shard-1", "shard-2"}

// crashSize is the size of entry i in the crash test: up to 512 KB, so
// that many writes are long enough for a kill to land inside one.
func crashSize(i uint64) int { return int(i*7919) % (512 << 10) }

// crashChild appends to every group until it is killed, printing each
// entry it was acknowledged ("group index"), and compacts now and then.
func crashChild(dir string) {
	w, err := Open(dir, Options{SegmentSize: 2 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	if os.Getenv(crashMidWriteEnv) != "" {
		// Stop inside the 20th write, half of it on disk, and say so.
		writes := 0
		w.midWrite = func() {
			if writes++; writes == 20 {
				mu.Lock()
				fmt.Fprintln(os.Stdout, "mid-write 0")
				select {}
			}
		}
	}
	var wg sync.WaitGroup
	for _, g := range crashGroups {
		wg.Go(func() {
			log := w.Log(g)
			next, _ := log.LastIndex()
			for next++; ; next++ {
				if err := log.StoreLog(entry(g, next, 1, crashSize(next))); err != nil {
					fmt.Fprintln(os.Stderr, "child:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%s %d\n", g, next)
				mu.Unlock()
				if next%25 == 0 && next > 30 {
					first, _ := log.FirstIndex()
					if err := log.DeleteRange(first, next-30); err != nil {
						fmt.Fprintln(os.Stderr, "child:", err)
						os.Exit(3)
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestCrashKillMidWrite kills a real process that is appending large
// entries with SIGKILL at a random moment, several times over the same
// directory, and checks after each kill that every acknowledged entry is
// there and intact, that nothing unwritten appears, and that appending
// goes on from where the log ends.
func TestCrashKillMidWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	torn := 0
	for round := 0; round < 10; round++ {
		// Odd rounds kill the process inside a write; even ones whenever.
		midWrite := round%2 == 1
		acked := runAndKill(t, dir, time.Duration(100+r.IntN(300))*time.Millisecond, midWrite)
		tornBefore := torn
		w, err := Open(dir, Options{SegmentSize: 2 << 20, Logf: func(string, ...any) { torn++ }})
		if err != nil {
			t.Fatalf("round %d: Open after kill: %v", round, err)
		}
		for _, g := range crashGroups {
			log := w.Log(g)
			first, _ := log.FirstIndex()
			last, _ := log.LastIndex()
			if last < acked[g] {
				t.Fatalf("round %d: %s ends at %d, but %d was acknowledged", round, g, last, acked[g])
			}
			if acked[g] > 60 && first > acked[g]-29 {
				t.Fatalf("round %d: %s starts at %d, past acknowledged %d less the 30 kept", round, g, first, acked[g])
			}
			for i := first; i <= last && first > 0; i++ {
				var got raft.Log
				if err := log.GetLog(i, &got); err != nil {
					t.Fatalf("round %d: %s entry %d: %v", round, g, i, err)
				}
				if want := entry(g, i, 1, crashSize(i)); !sameLog(&got, want) {
					t.Fatalf("round %d: %s entry %d differs from what was written", round, g, i)
				}
			}
		}
		if midWrite && torn == tornBefore {
			t.Fatalf("round %d: the process was killed inside a write, but reopening found no torn tail", round)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: acknowledged %v", round, acked)
	}
	t.Logf("torn tails cleared on reopen: %d of 10 kills (5 of them inside a write)", torn)
}

// runAndKill runs crashChild on dir for about d, kills it with SIGKILL and
// returns the last index acknowledged per group. With midWrite it kills
// the child once it stops inside a write instead. d counts from the first
// acknowledgement, since replaying the log before it takes a while.
func runAndKill(t *testing.T, dir string, d time.Duration, midWrite bool) map[string]uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	if midWrite {
		cmd.Env = append(cmd.Env, crashMidWriteEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var kill <-chan time.Time // armed by the first acknowledgement
	armed := false
	for {
		select {
		case <-kill:
			cmd.Process.Kill()
			kill = nil
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				if len(acked) == 0 {
					t.Fatal("the child acknowledged nothing")
				}
				return acked
			}
			var g string
			var i uint64
			if _, err := fmt.Sscanf(l, "%s %d", &g, &i); err != nil || !strings.HasPrefix(l, g) {
				t.Fatalf("child said %q", l)
			}
			if g == "mid-write" {
				cmd.Process.Kill()
				continue
			}
			acked[g] = max(acked[g], i)
			if !armed && !midWrite {
				kill, armed = time.After(d), true
			}
		}
	}
}
