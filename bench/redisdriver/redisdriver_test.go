package redisdriver

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorate/quorate/bench"
	"github.com/quorate/quorate/bench/accuracy"
	"github.com/quorate/quorate/internal/await"
)

// startRedis runs a redis-server of its own on a free loopback port, with
// no persistence, for the test's lifetime. Without redis-server the test is
// skipped: the driver can only be tested against the real thing, and CI
// installs it.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server); skipping the Redis baseline tests")
	}
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-done
		})
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		// Until it answers, or has exited: then it lost the port to someone
		// else, and another is tried.
		var exited bool
		err = await.Wait(10*time.Second, func() error {
			select {
			case <-done:
				exited = true
				return nil
			default:
				return rdb.Ping(context.Background()).Err()
			}
		})
		rdb.Close()
		if err == nil && !exited {
			return "redis://" + addr
		}
	}
	t.Fatal("could not start redis-server")
	return ""
}

// fakeNow is a settable clock for the scripts' ARGV now.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = t
}

func newDriver(t *testing.T, url string) (*Driver, *fakeNow) {
	t.Helper()
	d, err := New(context.Background(), url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	clk := &fakeNow{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	d.now = clk.now
	return d, clk
}

// check sends one request of the given keys and returns the outcomes.
func check(t *testing.T, d *Driver, l *bench.Limit, keys ...string) []bench.Outcome {
	t.Helper()
	items := make([]bench.Item, len(keys))
	for i, k := range keys {
		items[i] = bench.Item{Name: t.Name(), Key: k, Limit: l, Cost: 1}
	}
	out := make([]bench.Outcome, len(items))
	if err := d.Check(context.Background(), items, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func reasons(out []bench.Outcome) string {
	s := ""
	for _, o := range out {
		s += o.Reason.String() + " "
	}
	return s
}

func TestTokenBucket(t *testing.T) {
	d, clk := newDriver(t, startRedis(t))
	l := &bench.Limit{Algorithm: "token_bucket", Limit: 3, Period: time.Second}
	t0 := clk.now()
	for i := range 3 {
		if o := check(t, d, l, "a")[0]; !o.Allowed || o.Remaining != int64(2-i) || o.DecidedAt != t0.UnixNano() {
			t.Fatalf("take %d: %+v; want allowed, %d left, decided at now", i, o, 2-i)
		}
	}
	if o := check(t, d, l, "a")[0]; o.Allowed || o.Reason != bench.ReasonOverLimit {
		t.Fatalf("fourth take: %+v; want over limit", o)
	}
	// One token every 333.33ms: not yet at 333ms, exactly one at 334ms.
	clk.set(t0.Add(333 * time.Millisecond))
	if o := check(t, d, l, "a")[0]; o.Allowed {
		t.Fatalf("at 333ms: %+v; want denied (0.999 tokens)", o)
	}
	clk.set(t0.Add(334 * time.Millisecond))
	if o := check(t, d, l, "a")[0]; !o.Allowed {
		t.Fatalf("at 334ms: %+v; want allowed (1.002 tokens)", o)
	}
	// A caller whose clock is behind is clamped to the stored time: it is
	// decided at 334ms, with no refill and no time going backwards.
	clk.set(t0.Add(100 * time.Millisecond))
	if o := check(t, d, l, "a")[0]; o.Allowed || o.DecidedAt != t0.Add(334*time.Millisecond).UnixNano() {
		t.Fatalf("clock behind: %+v; want denied, decided at the stored 334ms", o)
	}
	// The key expires once the bucket would be full again.
	ttl, err := d.rdb.PTTL(context.Background(), t.Name()+":a").Result()
	if err != nil || ttl <= 0 || ttl > 1100*time.Millisecond {
		t.Errorf("TTL %v, %v; want about a second (time to refill 3 tokens)", ttl, err)
	}
}

func TestAllOrNothing(t *testing.T) {
	d, _ := newDriver(t, startRedis(t))
	l := &bench.Limit{Algorithm: "token_bucket", Limit: 2, Period: time.Hour}
	check(t, d, l, "full", "full") // empty "full"
	out := check(t, d, l, "room", "full")
	if got := reasons(out); got != "REFUNDED OVER_LIMIT " {
		t.Fatalf("reasons %q; want REFUNDED OVER_LIMIT", got)
	}
	// "room" was charged nothing: both of its tokens are still there.
	if got := reasons(check(t, d, l, "room", "room", "room")); got != "REFUNDED REFUNDED OVER_LIMIT " {
		t.Fatalf("three takes of a two-token bucket in one request: %q; want the first two refunded", got)
	}
	if got := reasons(check(t, d, l, "room", "room")); got != "WITHIN_LIMIT WITHIN_LIMIT " {
		t.Fatalf("two takes: %q; want both within limit (the refunds gave everything back)", got)
	}
}

func TestSlidingWindow(t *testing.T) {
	d, clk := newDriver(t, startRedis(t))
	l := &bench.Limit{Algorithm: "sliding_window", Limit: 10, Period: time.Second}
	// Windows are epoch-aligned; start at a whole second.
	base := time.Unix(1_800_000_000, 0)
	allowed := func(at time.Duration, n int) int {
		clk.set(base.Add(at))
		got := 0
		for range n {
			if check(t, d, l, "w")[0].Allowed {
				got++
			}
		}
		return got
	}
	// Same hand-computed case as the accountant's: 10 of 10, then with the
	// previous window weighing 5 at 1.5s, 5 of 8, then at 1.9s (weight 1,
	// current 5) 4 of 5.
	for _, c := range []struct {
		at      time.Duration
		n, want int
	}{{100 * time.Millisecond, 10, 10}, {1500 * time.Millisecond, 8, 5}, {1900 * time.Millisecond, 5, 4}, {3200 * time.Millisecond, 12, 10}} {
		if got := allowed(c.at, c.n); got != c.want {
			t.Errorf("at %v: %d of %d allowed; want %d", c.at, got, c.n, c.want)
		}
	}
}

// TestExactUnderLoad runs a real workload against Redis and holds it to
// the accountant: with the script's clamped now as the decision time, an
// exact limiter must agree with every decision.
func TestExactUnderLoad(t *testing.T) {
	url := startRedis(t)
	for _, alg := range []string{"token_bucket", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			d, err := New(context.Background(), url, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			// A limit low enough that the hottest key runs out even when a
			// loaded machine sends only a few hundred checks.
			w := bench.Workload{Distribution: bench.Zipf, Keys: 20, Items: 2, Cost: 1,
				Limit: bench.Limit{Algorithm: alg, Limit: 10, Period: 200 * time.Millisecond}}
			rec, err := bench.Run(context.Background(), d, bench.RunSpec{Workload: w, Namespace: fmt.Sprintf("exact-%s-%d", alg, time.Now().UnixNano()),
				Load: bench.Load{Concurrency: 8, Duration: 700 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			if rec.ErrorCount() != 0 {
				t.Fatalf("errors %v %v", rec.Errors, rec.FirstErrors)
			}
			l, _ := w.AccuracyLimit()
			r, err := accuracy.Account(l, rec.Arrivals)
			if err != nil {
				t.Fatal(err)
			}
			if r.Admitted == 0 || r.Admitted == r.Checks {
				t.Fatalf("%+v: want both admissions and denials", r)
			}
			// Lua numbers are doubles: Unix-nanosecond times (~1.8e18) are
			// rounded to 256ns inside the script, so a decision right at a
			// refill boundary can land one token either way of the exact
			// accountant. Allow that much, and no more.
			if r.OverAdmitted+r.UnderAdmitted > 2 {
				t.Errorf("%+v: the Lua script must decide exactly, up to double rounding at a boundary", r)
			}
		})
	}
}

func TestSupports(t *testing.T) {
	for _, c := range []struct {
		l  bench.Limit
		ok bool
	}{
		{bench.Limit{Algorithm: "token_bucket", Limit: 100, Period: time.Second}, true},
		{bench.Limit{Algorithm: "sliding_window", Limit: 100, Period: time.Minute}, true},
		{bench.Limit{Algorithm: "gcra", Limit: 100, Period: time.Second}, false},
		{bench.Limit{Algorithm: "token_bucket", Limit: 1 << 40, Period: 24 * time.Hour}, false}, // beyond 2^53
		{bench.Limit{Algorithm: "token_bucket", Limit: 1, Period: 1500 * time.Nanosecond}, false},
	} {
		if err := Supports(c.l); (err == nil) != c.ok {
			t.Errorf("Supports(%+v) = %v; want ok=%v", c.l, err, c.ok)
		}
	}
}

func TestUnreachable(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	if _, err := New(context.Background(), "redis://"+addr, 1); err == nil {
		t.Fatal("New to a closed port: no error")
	}
	if time.Since(start) > 6*time.Second {
		t.Errorf("New took %v to fail", time.Since(start))
	}
}

func TestErrorsAreCoded(t *testing.T) {
	url := startRedis(t)
	d, _ := newDriver(t, url)
	d.rdb.Close()
	items := []bench.Item{{Name: "x", Key: "y", Cost: 1, Limit: &bench.Limit{Algorithm: "token_bucket", Limit: 1, Period: time.Second}}}
	err := d.Check(context.Background(), items, make([]bench.Outcome, 1))
	if code := bench.ErrorCode(err); code != "UNAVAILABLE" {
		t.Errorf("closed client: %v, code %s; want UNAVAILABLE", err, code)
	}
	items[0].Limit = &bench.Limit{Algorithm: "gcra", Limit: 1, Period: time.Second}
	err = d.Check(context.Background(), items, make([]bench.Outcome, 1))
	if code := bench.ErrorCode(err); code != "INVALID_ARGUMENT" {
		t.Errorf("gcra: %v, code %s; want INVALID_ARGUMENT", err, code)
	}
}
