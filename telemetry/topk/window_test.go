package topk

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestWindowSteps: observations leave a window when their slot does. The
// 1m window has six 10s slots, the 5m window five 1m slots; t0 is a
// boundary of both.
func TestWindowSteps(t *testing.T) {
	tr, err := New(Config{Windows: []Window{{time.Minute, 6}, {5 * time.Minute, 5}}})
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	type obs struct {
		key string
		at  time.Duration
	}
	type top struct {
		window time.Duration
		at     time.Duration
		want   string // keys by count, "k:count"
	}
	for _, step := range []struct {
		observe []obs
		tops    []top
	}{
		{observe: []obs{{"a", 0}, {"b", 10*time.Second - ms}, {"c", 10 * time.Second}, {"c", 15 * time.Second}}},
		{tops: []top{
			{time.Minute, 0, "a:1 b:1"}, // c's slot is after now
			{time.Minute, 60*time.Second - ms, "c:2 a:1 b:1"},
			// At 60s the window is the slots from 10s: a and b's slot left.
			{time.Minute, 60 * time.Second, "c:2"},
			{time.Minute, 70*time.Second - ms, "c:2"},
			{time.Minute, 70 * time.Second, ""},
			{5 * time.Minute, 5*time.Minute - ms, "c:2 a:1 b:1"},
			{5 * time.Minute, 5 * time.Minute, ""},
		}},
		// Long after: the ring's old slots are stale, not counted.
		{observe: []obs{{"d", 10 * time.Minute}}, tops: []top{
			{time.Minute, 10 * time.Minute, "d:1"},
			{5 * time.Minute, 10 * time.Minute, "d:1"},
		}},
		// A clock that went back counts in the live slot.
		{observe: []obs{{"e", 9 * time.Minute}}, tops: []top{
			{time.Minute, 10 * time.Minute, "d:1 e:1"},
		}},
		// Every slot of a window, then one more: the ring keeps Slots-1.
		{observe: []obs{{"f", 11 * time.Minute}, {"g", 11*time.Minute + 10*time.Second}, {"h", 11*time.Minute + 20*time.Second},
			{"i", 11*time.Minute + 30*time.Second}, {"j", 11*time.Minute + 40*time.Second}, {"k", 11*time.Minute + 50*time.Second},
			{"l", 12 * time.Minute}}, tops: []top{
			{time.Minute, 12 * time.Minute, "g:1 h:1 i:1 j:1 k:1 l:1"},
			{5 * time.Minute, 12 * time.Minute, "d:1 e:1 f:1 g:1 h:1 i:1 j:1 k:1 l:1"},
		}},
	} {
		for _, o := range step.observe {
			tr.Observe("p", o.key, 1, false, t0.Add(o.at))
		}
		for _, q := range step.tops {
			s, err := tr.Top("p", Hits, q.window, 10, t0.Add(q.at))
			if err != nil {
				t.Fatal(err)
			}
			if got := render(s); got != q.want {
				t.Errorf("Top(%s) at t0+%s: %q, want %q", q.window, q.at, got, q.want)
			}
		}
	}
}

func render(s Summary) string {
	var out []string
	for _, e := range s.Entries {
		out = append(out, fmt.Sprintf("%s:%d", e.Key, e.Count))
	}
	return strings.Join(out, " ")
}

// TestWindowSlidingCount: one observation a second for three minutes; at
// every second after the first minute, the 1m window holds exactly the
// observations of its six slots (the current one partly).
func TestWindowSlidingCount(t *testing.T) {
	tr, _ := New(Config{Windows: []Window{{time.Minute, 6}}})
	for s := range 180 {
		now := t0.Add(time.Duration(s) * time.Second)
		tr.Observe("p", fmt.Sprint("k", s%7), 2, s%3 == 0, now)
		if s < 60 {
			continue
		}
		// The slots from the start of the one five before now's.
		from := (s/10 - 5) * 10
		hits, _ := tr.Top("p", Hits, time.Minute, 10, now)
		if want := int64(2 * (s - from + 1)); hits.N != want {
			t.Fatalf("at %ds: hits n %d, want %d", s, hits.N, want)
		}
		denied, _ := tr.Top("p", Denied, time.Minute, 10, now)
		want := int64(0)
		for i := from; i <= s; i++ {
			if i%3 == 0 {
				want++
			}
		}
		if denied.N != want {
			t.Fatalf("at %ds: denied n %d, want %d", s, denied.N, want)
		}
	}
}

// TestWindowModel: random observations, with gaps of seconds to hours,
// against an exact model of each window (the slots of its length holding
// now and the Slots-1 before). With K above the keys, every count is
// exact; with K below, the guarantee holds with N the window's weight.
func TestWindowModel(t *testing.T) {
	for _, k := range []int{64, 4} {
		t.Run(fmt.Sprint("k=", k), func(t *testing.T) { windowModel(t, k) })
	}
}

type modelObs struct {
	at  time.Duration
	key string
	w   int64
}

func windowModel(t *testing.T, k int) {
	tr := newTracker(t, Config{K: k})
	r := rand.New(rand.NewPCG(7, uint64(k)))
	var obs []modelObs
	at := time.Duration(0)
	for i := range 4000 {
		switch r.IntN(100) {
		case 0:
			at += time.Duration(5+r.IntN(70)) * time.Minute
		case 1, 2, 3:
			at += time.Duration(r.IntN(300)) * time.Second
		default:
			at += time.Duration(r.IntN(20_000)) * time.Millisecond
		}
		o := modelObs{at, fmt.Sprint("k", min(r.IntN(20), r.IntN(20))), int64(1 + r.IntN(3))}
		obs = append(obs, o)
		if r.IntN(2) == 0 { // the node's ticker ends the slot, not the check
			tr.Tick(t0.Add(o.at))
		}
		tr.Observe("p", o.key, o.w, false, t0.Add(o.at))
		if i%10 != 9 {
			continue
		}
		now := at + time.Duration(r.IntN(30_000))*time.Millisecond
		for _, w := range DefaultWindows() {
			checkModelWindow(t, tr, obs, w, now, k)
		}
	}
}

func checkModelWindow(t *testing.T, tr *Tracker, obs []modelObs, w Window, now time.Duration, k int) {
	t.Helper()
	width := w.slot()
	// now's slot ends at the next multiple of width since the Unix epoch.
	end := time.Unix(0, (floorDiv(t0.Add(now).UnixNano(), int64(width))+1)*int64(width))
	from := end.Add(-w.Length)
	exact := map[string]int64{}
	var n int64
	for _, o := range obs {
		if at := t0.Add(o.at); !at.Before(from) && at.Before(end) {
			exact[o.key] += o.w
			n += o.w
		}
	}
	s, err := tr.Top("p", Hits, w.Length, k, t0.Add(now))
	if err != nil {
		t.Fatal(err)
	}
	if s.N != n {
		t.Fatalf("window %s at +%s: n %d, want %d", w.Length, now, s.N, n)
	}
	listed := map[string]bool{}
	for _, e := range s.Entries {
		listed[e.Key] = true
		if tc := exact[e.Key]; e.Count < tc || e.Count-e.Err > tc || (k >= 20 && e.Err != 0) {
			t.Fatalf("window %s at +%s: %+v, true %d", w.Length, now, e, tc)
		}
	}
	for key, tc := range exact {
		if !listed[key] && tc > s.Min {
			t.Fatalf("window %s at +%s: %q (%d) not listed, min %d", w.Length, now, key, tc, s.Min)
		}
	}
	if s.Min*int64(k) > n {
		t.Fatalf("window %s at +%s: min %d above N/k = %d/%d", w.Length, now, s.Min, n, k)
	}
}
