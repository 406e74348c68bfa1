package decisionlog

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The sampled-in fraction of allows must be AllowFraction: 100k draws
// within 3 sigma of n*p, from a seeded source so that a failure repeats.
func TestWantsSamplesAllows(t *testing.T) {
	const n = 100_000
	for _, f := range []float64{0.1, 0.5, 0.01, 0.999, 1e-4} {
		src := rand.New(rand.NewPCG(1, uint64(f*1e6)))
		l, err := newLogger(Config{AllowFraction: f, Rand: src.Uint64})
		if err != nil {
			t.Fatal(err)
		}
		got := countWanted(l, n)
		want, sigma := n*f, math.Sqrt(n*f*(1-f))
		if math.Abs(float64(got)-want) > 3*sigma {
			t.Errorf("fraction %v: %d of %d allows wanted, want %.0f ± %.0f (3 sigma)", f, got, n, want, 3*sigma)
		}
	}
}

// The default source (math/rand/v2's) is unseeded, so the bound is 5 sigma
// (a false alarm once in 1.7 million runs).
func TestWantsDefaultSource(t *testing.T) {
	const n, f = 100_000, DefaultAllowFraction
	l, err := newLogger(Config{})
	if err != nil {
		t.Fatal(err)
	}
	got := countWanted(l, n)
	if want, sigma := n*f, math.Sqrt(n*f*(1-f)); math.Abs(float64(got)-want) > 5*sigma {
		t.Errorf("%d of %d allows wanted, want %.0f ± %.0f (5 sigma)", got, n, want, 5*sigma)
	}
}

func TestWantsEdges(t *testing.T) {
	all, _ := newLogger(Config{AllowFraction: 1})
	none, _ := newLogger(Config{NoAllows: true})
	if got := countWanted(all, 10_000); got != 10_000 {
		t.Errorf("AllowFraction 1: %d of 10000 wanted", got)
	}
	if got := countWanted(none, 10_000); got != 0 {
		t.Errorf("NoAllows: %d of 10000 wanted", got)
	}
	for _, k := range []Kind{Deny, ShadowWouldDeny, FailOpen} {
		if !none.Wants(k) {
			t.Errorf("Wants(%v) is false", k)
		}
	}
	// The injected source decides: the lowest draw is in at any fraction,
	// the highest out below 1.
	low, _ := newLogger(Config{AllowFraction: 1e-9, Rand: func() uint64 { return 0 }})
	high, _ := newLogger(Config{AllowFraction: 0.999999, Rand: func() uint64 { return math.MaxUint64 }})
	if !low.Wants(Allow) || high.Wants(Allow) {
		t.Errorf("Wants with the lowest draw %v, with the highest %v; want true, false", low.Wants(Allow), high.Wants(Allow))
	}
}

func countWanted(l *Logger, n int) int {
	got := 0
	for range n {
		if l.Wants(Allow) {
			got++
		}
	}
	return got
}

func TestNilLogger(t *testing.T) {
	var l *Logger
	if l.Wants(Deny) {
		t.Error("a nil logger wants a deny")
	}
	l.Log(typical(0))
	if err := l.Close(context.Background()); err != nil {
		t.Error(err)
	}
	if _, _, _, err := l.Subscribe(Filter{}, 0); !errors.Is(err, ErrDisabled) {
		t.Errorf("Subscribe on nil: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := map[string]Config{
		"Config.AllowFraction -0.1": {AllowFraction: -0.1},
		"Config.AllowFraction 1.5":  {AllowFraction: 1.5},
		"Config.AllowFraction NaN":  {AllowFraction: math.NaN()},
		"Config.NoAllows":           {NoAllows: true, AllowFraction: 0.2},
		"Config.Buffer -1":          {Buffer: -1},
		"Config.Buffer 1048577":     {Buffer: MaxBuffer + 1},
		"Config.SinkBuffer -5":      {SinkBuffer: -5},
		"Config.Sinks[1] is nil":    {Sinks: []Sink{&memSink{}, nil}},
		"Config.Sinks[0] has no":    {Sinks: []Sink{NewWriterSink("", nil)}},
	}
	for want, c := range cases {
		_, err := New(c)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// A sink that blocks forever must neither block Log nor starve another
// sink: 100k Logs return, the stuck sink's drops are counted, and the
// other sink gets every record the logger accepted but those it was too
// slow for (counted apart), and at least a queue's worth.
func TestStuckSinkBlocksNothing(t *testing.T) {
	const sinkBuffer = 1024
	reg := prometheus.NewRegistry()
	stuck, good := newBlockSink(), &memSink{name: "good"}
	l, err := New(Config{Sinks: []Sink{stuck, good}, SinkBuffer: sinkBuffer, Registerer: reg, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	r := typical(0)
	for range 100_000 {
		l.Log(r)
	}
	accepted := metric(t, reg, "quorate_decision_log_records_total", "kind", "deny")
	queued := metric(t, reg, "quorate_decision_log_dropped_total", "where", "queue")
	if accepted+queued != 100_000 || accepted < DefaultBuffer {
		t.Fatalf("accepted %v + dropped at the queue %v, want 100000 with at least a queue's worth (%d) accepted", accepted, queued, DefaultBuffer)
	}
	<-stuck.entered
	var goodDropped float64
	waitFor(t, "the good sink to account for every accepted record", func() bool {
		goodDropped = metric(t, reg, "quorate_decision_log_dropped_total", "where", "good")
		return float64(good.count())+goodDropped == accepted
	})
	t.Logf("accepted %v, dropped at the queue %v, good sink wrote %d and dropped %v", accepted, queued, good.count(), goodDropped)
	// Its queue held the first sinkBuffer lines whatever its speed.
	if good.count() < sinkBuffer {
		t.Errorf("the good sink wrote %d of %v", good.count(), accepted)
	}
	// The stuck sink holds one batch in Write and a queue's worth.
	dropped := metric(t, reg, "quorate_decision_log_dropped_total", "where", "blocked")
	if min := accepted - sinkBuffer - float64(stuck.Batching().MaxRecords); dropped < min {
		t.Errorf("stuck sink dropped %v, want at least %v", dropped, min)
	}
	close(stuck.release)
	closeLogger(t, l)
}

// A full queue drops the record and counts it; nothing waits.
func TestFullQueueDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink := &memSink{}
	l, err := newLogger(Config{Sinks: []Sink{sink}, Buffer: 4, Registerer: reg, AllowFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range 10 { // the writer is not started: the queue only fills
			l.Log(typical(i))
		}
		l.Log(&Record{Decision: "ALLOW", Reason: "WITHIN_LIMIT"})
	}()
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("Log blocked on a full queue")
	}
	if got := metric(t, reg, "quorate_decision_log_dropped_total", "where", "queue"); got != 7 {
		t.Errorf("dropped at the queue: %v, want 7", got)
	}
	if got := metric(t, reg, "quorate_decision_log_records_total", "kind", "deny"); got != 4 {
		t.Errorf("denies accepted: %v, want 4", got)
	}
	l.start()
	closeLogger(t, l)
	if got := len(sink.lines()); got != 4 {
		t.Errorf("sink got %d lines, want the 4 queued", got)
	}
}

// Close writes everything queued before it returns, and Log after Close
// does nothing.
func TestCloseFlushes(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink := &memSink{}
	l, err := New(Config{Sinks: []Sink{sink}, Buffer: 5000, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		l.Log(typical(i))
	}
	closeLogger(t, l)
	rs := sink.records(t)
	if len(rs) != 5000 {
		t.Fatalf("%d records written, want 5000", len(rs))
	}
	for i, r := range rs {
		if r.RequestID != typical(i).RequestID {
			t.Fatalf("record %d is %s", i, r.RequestID)
		}
	}
	n := 0
	for _, line := range sink.lines() {
		n += len(line)
	}
	if got := metric(t, reg, "quorate_decision_log_bytes_total", "sink", "mem"); got != float64(n) {
		t.Errorf("bytes_total %v, want %d", got, n)
	}
	l.Log(typical(0))
	if got := metric(t, reg, "quorate_decision_log_records_total", "kind", "deny"); got != 5000 {
		t.Errorf("records after Close: %v", got)
	}
}

// Close gives up at its context's end even if a sink never returns.
func TestCloseDeadline(t *testing.T) {
	stuck := newBlockSink()
	defer close(stuck.release)
	l, err := New(Config{Sinks: []Sink{stuck}})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(typical(0))
	<-stuck.entered
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- l.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: %v, want the deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close outlived its context by 20 s")
	}
}

// The logger fills node, time, sample rate and kind.
func TestLogFills(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink := &memSink{}
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	l, err := New(Config{Sinks: []Sink{sink}, Node: "n7", AllowFraction: 0.25, Registerer: reg, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	in := []Record{
		{Decision: "DENY", Reason: "OVER_LIMIT"},
		{Decision: "ALLOW", Reason: "SHADOW_WOULD_DENY", Node: "n2"},
		{Decision: "ALLOW", Reason: "FAIL_OPEN", Time: t0},
		{Decision: "ALLOW", Reason: "WITHIN_LIMIT", SampleRate: 0.9},
		{Decision: "ALLOW", Reason: "WITHIN_LIMIT", Kind: Deny},
	}
	for i := range in {
		l.Log(&in[i])
	}
	closeLogger(t, l)
	rs := sink.records(t)
	wantRate := []float64{1, 1, 1, 0.25, 1}
	wantNode := []string{"n7", "n2", "n7", "n7", "n7"}
	for i, r := range rs {
		if r.SampleRate != wantRate[i] || r.Node != wantNode[i] {
			t.Errorf("record %d: rate %v node %q, want %v %q", i, r.SampleRate, r.Node, wantRate[i], wantNode[i])
		}
		if wantTime := in[i].Time; wantTime.IsZero() && !r.Time.Equal(now) || !wantTime.IsZero() && !r.Time.Equal(wantTime) {
			t.Errorf("record %d: time %v", i, r.Time)
		}
	}
	for kind, want := range map[string]float64{"deny": 2, "shadow_would_deny": 1, "fail_open": 1, "allow": 1} {
		if got := metric(t, reg, "quorate_decision_log_records_total", "kind", kind); got != want {
			t.Errorf("records_total{kind=%s} %v, want %v", kind, got, want)
		}
	}
}

// A line past MaxLineBytes loses its policies; one still too long is
// dropped and counted.
func TestLongRecords(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink := &memSink{}
	l, err := New(Config{Sinks: []Sink{sink}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	long := typical(0)
	long.Policies = make([]Verdict, 2000)
	for i := range long.Policies {
		long.Policies[i] = Verdict{ID: "policy-with-a-long-name", Key: strings.Repeat("k", 20)}
	}
	l.Log(long)
	l.Log(&Record{Decision: "DENY", RequestID: strings.Repeat("x", MaxLineBytes)})
	closeLogger(t, l)
	rs := sink.records(t)
	if len(rs) != 1 || !rs[0].Truncated || rs[0].Policies != nil || rs[0].RequestID != long.RequestID {
		t.Fatalf("got %+v, want the first record truncated", rs)
	}
	if got := metric(t, reg, "quorate_decision_log_dropped_total", "where", "queue"); got != 1 {
		t.Errorf("dropped at the queue: %v, want 1", got)
	}
}

func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		l, err := New(Config{Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		l.Log(typical(0))
		closeLogger(t, l)
	}
	if got := metric(t, reg, "quorate_decision_log_records_total", "kind", "deny"); got != 2 {
		t.Errorf("two loggers on one registry counted %v denies, want 2", got)
	}
}
