package chaos

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
)

// TestShortChaos runs the whole harness for 100s: three real agents, a
// kill, a pause, a partition (when nftables can be used), a membership
// change (a join, a replacement, a leave), the full
// restart, and every checker. Any violation fails it; the results folder is
// kept then and its path logged.
func TestShortChaos(t *testing.T) {
	out, err := os.MkdirTemp("", "quorate-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Binary: clustertest.Binary(t), Nodes: 3, Duration: 100 * time.Second, Seed: 1,
		FaultInterval: 2 * time.Second, Out: out, CheckTimeout: 30 * time.Second, Progress: testLog{t},
		// Other packages' tests run meanwhile, some of them timing-sensitive
		// clusters of their own: leave them CPU.
		LeasedPause: 20 * time.Millisecond}
	start := time.Now()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run failed (results in %s): %v", out, err)
	}
	t.Logf("run took %s\n%s", time.Since(start).Round(time.Second), rep.Text())
	kinds := map[string]bool{}
	for _, f := range rep.Faults {
		if !strings.HasPrefix(f.Note, "skipped") {
			kinds[strings.SplitN(string(f.Kind), "-", 2)[0]] = true
		}
	}
	want := []string{"kill", "pause", "member"}
	if rep.Partitions != "enabled" {
		t.Logf("%s", rep.Partitions)
	} else {
		want = append(want, "partition")
	}
	for _, k := range want {
		if !kinds[k] {
			t.Errorf("no %s fault was injected (results in %s)", k, out)
		}
	}
	// The checked keys' requests must have met others in log entries, or a
	// batcher that mixed up its replies would go unseen.
	if rep.CheckedShared == 0 || rep.FillerDecided == 0 {
		t.Errorf("no checked request shared a log entry (entries %d, shared %d, filler decided %d)", rep.Entries, rep.SharedEntries, rep.FillerDecided)
	}
	if !rep.OK() {
		t.Fatalf("violations (results in %s):\n%s\nreplay: %s", out, strings.Join(rep.Violations, "\n"), rep.Replay)
	}
	if !t.Failed() {
		os.RemoveAll(out)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The schedule is a function of the seed, and its first faults cover a
// kill, a pause and a partition.
func TestPlanIsSeeded(t *testing.T) {
	a := plan(42, 5, 8, 10*time.Minute, 5*time.Second)
	b := plan(42, 5, 8, 10*time.Minute, 5*time.Second)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if reflect.DeepEqual(a, plan(43, 5, 8, 10*time.Minute, 5*time.Second)) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	for seed := range uint64(100) {
		p := plan(seed, 3, 8, time.Minute, 2*time.Second)
		seen := map[string]bool{}
		var total time.Duration
		for i, f := range p {
			if i < 3 {
				seen[strings.SplitN(string(f.Kind), "-", 2)[0]] = true
			}
			total += f.Wait + f.Hold
			if f.Kind == PartitionHalves && (f.Minor < 1 || f.Minor > 1) {
				t.Fatalf("seed %d: minority of %d in 3 nodes", seed, f.Minor)
			}
		}
		if len(seen) != 3 || total > time.Minute {
			t.Fatalf("seed %d: first kinds %v, total %s", seed, seen, total)
		}
	}
}

// The leased prefix bound: capacity at the first call, then limit per
// period, and nothing more.
func TestCheckLeased(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	sec := int64(time.Second)
	k := &leasedKey{keySpec: keySpec{"k", tb(1, time.Second, 2)}, first: t0}
	// Two at once (the burst), then one after 500ms, when the bucket
	// (1 a second) has refilled nothing yet: over.
	k.allows = []span{{t0, t0 + 1}, {t0, t0 + 2}, {t0, t0 + sec/2}}
	none := func(int64) int64 { return 0 }
	r := checkLeased(k, time.Unix(0, t0+sec), none)
	if r.OverAdmitted != 1 || r.MaxExcess != 1 || r.WorstAt != t0+sec/2 {
		t.Fatalf("got %+v, want one over-admission at 500ms", r)
	}
	// A clock skewed 1s ahead by then makes the same history possible.
	r = checkLeased(k, time.Unix(0, t0+sec), func(int64) int64 { return sec })
	if r.OverAdmitted != 0 {
		t.Fatalf("with 1s of skew slack: %+v", r)
	}
	// Within the bound: 2 at once, the third at 500ms when the limit is
	// 2/s (one token refilled every 500ms).
	// Three more checks were denied: the limit allowed 6 by 2s, the
	// demand was 6, so 3 are under-admitted.
	k.limit, k.denied = tb(2, time.Second, 2), 3
	if r = checkLeased(k, time.Unix(0, t0+2*sec), none); r.OverAdmitted != 0 || r.AllowedByLimit != 6 || r.UnderAdmitted != 3 {
		t.Fatalf("got %+v", r)
	}
}

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(100, 0)
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	got, at := longestGap([]int64{ns(3 * time.Second), ns(time.Second), ns(4 * time.Second)}, t0, t0.Add(10*time.Second))
	if got != 6*time.Second || !at.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("got %s from %s, want 6s from the last success to the end", got, at)
	}
}

// No fault may turn into a permanent removal by itself: every agent of a
// five-node run (where the other nodes can hold a dead one's replicas, so
// the meta leader replaces a node once the grace is over) gets a
// --dead-node-grace longer than the longest a fault keeps a node away,
// restart included.
func TestGraceOutlastsFaults(t *testing.T) {
	c, err := newCluster("quorate", t.TempDir(), 5, 8, 777001)
	if err != nil {
		t.Fatal(err)
	}
	var longest time.Duration
	for _, k := range []Kind{KillNode, KillLeader, PauseNode, PauseLeader, PartitionHalves, PartitionLeader, PartitionBridge, ClockSkew} {
		_, hi := holdBounds(k)
		longest = max(longest, hi+restartTimeout)
	}
	for i := range c.agents {
		args := c.lc.Args(i)
		at := slices.Index(args, "--dead-node-grace")
		if at < 0 || at+1 == len(args) {
			t.Fatalf("%s: no --dead-node-grace in %q", c.agents[i].id, args)
		}
		grace, err := time.ParseDuration(args[at+1])
		if err != nil {
			t.Fatal(err)
		}
		if grace < 2*longest {
			t.Errorf("%s: --dead-node-grace %s; a fault can keep a node away %s", c.agents[i].id, grace, longest)
		}
	}
}
