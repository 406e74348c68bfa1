package topk

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// t0 is a slot boundary of every default window (midnight UTC).
var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func newTracker(t *testing.T, cfg Config) *Tracker {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func dropped(tr *Tracker, reason string) float64 {
	return read(tr.dropped.WithLabelValues(reason))
}

func read(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}

// TestTrackerPolicyBound: past MaxPolicies, a new policy's observations are
// dropped and counted until the tracked ones have been idle for the
// longest window; then they are forgotten and the new one is tracked.
func TestTrackerPolicyBound(t *testing.T) {
	tr := newTracker(t, Config{MaxPolicies: 2, Windows: []Window{{time.Minute, 6}, {2 * time.Minute, 2}}})
	tr.Observe("p1", "a", 1, false, t0)
	tr.Observe("p2", "a", 1, true, t0)
	tr.Observe("p3", "a", 1, false, t0)
	tr.Observe("p3", "b", 1, false, t0.Add(10*time.Second))                // pruned nothing: p1, p2 are not idle
	tr.Observe("p3", "b", 1, false, t0.Add(2*time.Minute-time.Nanosecond)) // p1 not idle for 2m yet
	tr.Observe("p2", "a", 1, false, t0.Add(time.Minute))                   // p2 busy again
	// p1 is idle from 2m, but the last prune was less than a slot (10s)
	// ago: dropped without looking.
	tr.Observe("p3", "b", 1, false, t0.Add(2*time.Minute+9*time.Second))
	if got := tr.Policies(); !slices.Equal(got, []string{"p1", "p2"}) {
		t.Fatalf("policies %q", got)
	}
	if d := dropped(tr, "policies"); d != 4 {
		t.Errorf("dropped %v, want 4", d)
	}
	at := t0.Add(2*time.Minute + 10*time.Second - time.Nanosecond)
	tr.Observe("p3", "c", 1, false, at)
	if got := tr.Policies(); !slices.Equal(got, []string{"p2", "p3"}) {
		t.Fatalf("after p1 idle for 2m: policies %q", got)
	}
	if g := read(tr.tracked); g != 2 {
		t.Errorf("tracked gauge %v", g)
	}
	if s, _ := tr.Top("p3", Hits, time.Minute, 5, at); render(s) != "c:1" {
		t.Errorf("p3 after it was admitted: %q", render(s))
	}
	if n := tr.Tick(t0.Add(3 * time.Minute)); n != 1 || !slices.Equal(tr.Policies(), []string{"p3"}) {
		t.Errorf("Tick at 3m: %d, left %q", n, tr.Policies())
	}
}

// TestTrackerInvalid: bad observations are dropped and counted, and take
// no policy slot.
func TestTrackerInvalid(t *testing.T) {
	tr := newTracker(t, Config{})
	tr.Observe("p", "a", -1, false, t0)
	tr.Observe("", "a", 1, false, t0)
	tr.Observe(strings.Repeat("p", MaxPolicyLen+1), "a", 1, false, t0)
	tr.Observe("p", strings.Repeat("k", MaxKeyLen+1), 1, false, t0)
	tr.Observe("p", "a", 0, false, t0) // nothing to count: not an error either
	if d := dropped(tr, "invalid"); d != 4 {
		t.Errorf("invalid %v, want 4", d)
	}
	if p := tr.Policies(); len(p) != 0 {
		t.Errorf("policies %q", p)
	}
	tr.Observe("p", "", 0, true, t0) // a global policy's denial, of a zero-cost check
	s, _ := tr.Top("p", Denied, time.Minute, 1, t0)
	h, _ := tr.Top("p", Hits, time.Minute, 1, t0)
	if len(s.Entries) != 1 || s.Entries[0] != (Entry{"", 1, 0}) || h.N != 0 {
		t.Errorf("denied %+v hits %+v", s, h)
	}
}

// TestTrackerConcurrent: under -race, observers of overlapping policies
// and readers lose nothing: every observation is in a summary or counted
// as dropped, and at most MaxPolicies are tracked.
func TestTrackerConcurrent(t *testing.T) {
	const workers, per, policies = 4, 5000, 8
	tr := newTracker(t, Config{K: 8, MaxPolicies: 5})
	now := t0.Add(time.Second) // one slot: every window holds everything
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				tr.Observe(fmt.Sprint("p", (w+i)%policies), fmt.Sprint("k", i%50), 2, i%4 == 0, now)
			}
		})
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tr.Summaries(now, 5*time.Minute, Denied, "", 3); err != nil {
				t.Error(err)
				return
			}
			tr.Top("p1", Hits, time.Minute, 3, now)
			tr.Tick(now) // prunes nothing: all are busy
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	checkConcurrentTotals(t, tr, now, workers*per)
}

func checkConcurrentTotals(t *testing.T, tr *Tracker, now time.Time, total int) {
	t.Helper()
	if n := len(tr.Policies()); n != 5 {
		t.Errorf("%d policies tracked, want 5", n)
	}
	hits, _ := tr.Summaries(now, time.Hour, Hits, "", tr.K())
	denied, _ := tr.Summaries(now, time.Minute, Denied, "", tr.K())
	var h, d int64
	for _, s := range hits {
		h += s.N
		checkValid(t, s)
	}
	for _, s := range denied {
		d += s.N
		checkValid(t, s)
	}
	drops := int64(dropped(tr, "policies"))
	if h/2+drops != int64(total) || d*4 != h/2 {
		t.Errorf("hits %d (weight 2) + dropped %d != %d, or denied %d not a quarter", h, drops, total, d)
	}
}

func checkValid(t *testing.T, s Summary) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
}

// TestQueryErrors: bad arguments are refused, naming the argument.
func TestQueryErrors(t *testing.T) {
	tr := newTracker(t, Config{})
	for _, c := range []struct {
		by     Kind
		window time.Duration
		n      int
		field  string
	}{
		{Hits, 2 * time.Minute, 1, "window 2m0s"},
		{Kind(7), time.Minute, 1, "by is 7"},
		{Denied, time.Minute, 0, "n is 0"},
	} {
		_, err := tr.Top("p", c.by, c.window, c.n, t0)
		_, err2 := tr.Summaries(t0, c.window, c.by, "", c.n)
		for _, e := range []error{err, err2} {
			if !errors.Is(e, ErrArgument) || !strings.Contains(e.Error(), c.field) {
				t.Errorf("%+v: %v, want ErrArgument naming %q", c, e, c.field)
			}
		}
	}
	if _, err := ParseKind("allowed"); !errors.Is(err, ErrArgument) {
		t.Errorf("ParseKind: %v", err)
	}
	s, err := tr.Top("unknown", Denied, time.Hour, 10, t0)
	if err != nil || s.N != 0 || len(s.Entries) != 0 || s.K != 10 || s.Policy != "unknown" {
		t.Errorf("untracked policy: %+v %v", s, err)
	}
}

// TestConfigErrors: a config out of range is refused, naming the field.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{K: -1}, "K is -1"},
		{Config{K: MaxK + 1}, "K is"},
		{Config{MaxPolicies: -5}, "MaxPolicies"},
		{Config{Windows: []Window{}}, "Windows has 0"},
		{Config{Windows: []Window{{time.Minute, 0}}}, "Windows[0].Slots"},
		{Config{Windows: []Window{{time.Minute, 6}, {time.Minute, 7}}}, "Windows[1].Length 1m0s does not divide"},
		{Config{Windows: []Window{{time.Minute, 6}, {time.Minute, 3}}}, "is also Windows[0]"},
		{Config{Windows: []Window{{time.Microsecond, 1}}}, "Windows[0].Length is 1µs"},
	} {
		if _, err := New(c.cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want ErrConfig naming %q", c.cfg, err, c.field)
		}
	}
}

// TestRegister: the metrics reach a registry under their documented
// names, and counted before Register.
func TestRegister(t *testing.T) {
	tr := newTracker(t, Config{})
	tr.Observe("p", "a", -1, false, t0)
	tr.Observe("p", "a", 1, false, t0)
	reg := prometheus.NewPedanticRegistry()
	if err := tr.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[mf.GetName()+fmt.Sprint(labels)] = fmt.Sprint(v)
		}
	}
	want := map[string]string{
		"quorate_topk_policies[]":                     "1",
		"quorate_topk_dropped_total[reason=invalid]":  "1",
		"quorate_topk_dropped_total[reason=policies]": "0",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gathered %v, want %v", got, want)
	}
	if err := tr.Register(reg); err == nil {
		t.Error("registered twice")
	}
}

// TestKeysCopied: a tracker keeps its own copy of a key, not the caller's
// memory (decide.Recorder's contract: copy what you keep).
func TestKeysCopied(t *testing.T) {
	tr := newTracker(t, Config{})
	buf := []byte("t_1\x1f/v1/orders")
	tr.Observe("p", unsafe.String(&buf[0], len(buf)), 1, true, t0)
	buf[0] = 'X' // the caller reuses its buffer
	for _, by := range []Kind{Hits, Denied} {
		s, _ := tr.Top("p", by, time.Minute, 1, t0)
		if len(s.Entries) != 1 || s.Entries[0].Key != "t_1\x1f/v1/orders" {
			t.Errorf("%s: %+v", by, s.Entries)
		}
	}
}

// TestTick: Tick ends the slots that ended (so the next check does not
// pay for it) and changes no window's answer.
func TestTick(t *testing.T) {
	tr := newTracker(t, Config{})
	for i := range 100 {
		tr.Observe("p", fmt.Sprint("k", i%7), 1, i%2 == 0, t0.Add(time.Duration(i)*time.Second))
	}
	now := t0.Add(150 * time.Second) // ends 10s, 50s and 150s slots
	before := map[string]string{}
	for _, w := range tr.Windows() {
		s, _ := tr.Top("p", Denied, w, 10, now)
		before[w.String()] = render(s)
	}
	if n := tr.Tick(now); n != 0 {
		t.Errorf("pruned %d", n)
	}
	v, _ := tr.policies.Load("p")
	for _, s := range v.(*policyState).kinds {
		if s.liveEnd <= now.UnixNano() || s.live.N() != 0 {
			t.Errorf("slot not ended: live to %d, now %d, n %d", s.liveEnd, now.UnixNano(), s.live.N())
		}
	}
	for _, w := range tr.Windows() {
		if s, _ := tr.Top("p", Denied, w, 10, now); render(s) != before[w.String()] {
			t.Errorf("%s after Tick: %q, before %q", w, render(s), before[w.String()])
		}
	}
}
