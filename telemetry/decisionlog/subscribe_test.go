package decisionlog

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSubscribeFilters(t *testing.T) {
	l, err := New(Config{Node: "n1", AllowFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	filters := map[string]Filter{
		"any":          {},
		"policy":       {Policy: "plan_free"},
		"shadow":       {Policy: "trial"},
		"tenant":       {Tenant: "t_2"},
		"deny":         {Decision: "deny"},
		"node":         {Node: "n2"},
		"tenant+deny":  {Tenant: "t_1", Decision: "DENY"},
		"nothing":      {Policy: "none"},
		"policy+node2": {Policy: "plan_free", Node: "n2"},
	}
	tails := map[string]<-chan []byte{}
	for name, f := range filters {
		ch, _, _, err := l.Subscribe(f, 0)
		if err != nil {
			t.Fatal(err)
		}
		tails[name] = ch
	}
	trial := []Verdict{{ID: "plan_free"}, {ID: "trial", Mode: "SHADOW", Reason: "SHADOW_WOULD_DENY"}}
	for _, r := range []Record{
		{RequestID: "a", Decision: "DENY", Policy: "plan_free", Descriptors: Descriptors{TenantID: "t_1"}},
		{RequestID: "b", Decision: "ALLOW", Policy: "plan_free", Descriptors: Descriptors{TenantID: "t_2"}, Policies: trial},
		{RequestID: "c", Decision: "DENY", Policy: "ip_safety", Descriptors: Descriptors{TenantID: "t_2"}, Node: "n2"},
		{RequestID: "d", Decision: "ALLOW", Reason: "FAIL_OPEN", Policy: "plan_free", Node: "n2"},
	} {
		l.Log(&r)
	}
	closeLogger(t, l) // closes every tail once all is delivered
	want := map[string]string{
		"any": "abcd", "policy": "abd", "shadow": "b", "tenant": "bc", "deny": "ac",
		"node": "cd", "tenant+deny": "a", "nothing": "", "policy+node2": "d",
	}
	for name, ch := range tails {
		got := ""
		for line := range ch {
			var r Record
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			got += r.RequestID
		}
		if got != want[name] {
			t.Errorf("tail %s saw %q, want %q", name, got, want[name])
		}
	}
}

// A subscriber that does not read loses what its channel cannot hold,
// counted, while another still gets everything.
func TestSubscribeDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := New(Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	_, dropped, _, err := l.Subscribe(Filter{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	all, allDropped, _, err := l.Subscribe(Filter{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		l.Log(typical(i))
	}
	closeLogger(t, l)
	n := 0
	for range all {
		n++
	}
	if n != 10 || allDropped() != 0 {
		t.Errorf("reading tail got %d, dropped %d; want 10, 0", n, allDropped())
	}
	if dropped() != 9 {
		t.Errorf("idle tail dropped %d, want 9", dropped())
	}
	if got := metric(t, reg, "quorate_decision_log_dropped_total", "where", "subscriber"); got != 9 {
		t.Errorf("dropped_total{where=subscriber} %v, want 9", got)
	}
}

func TestSubscribeLimits(t *testing.T) {
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var cancels []func()
	var first <-chan []byte
	for i := range MaxSubscribers {
		ch, _, cancel, err := l.Subscribe(Filter{}, 1)
		if err != nil {
			t.Fatalf("subscriber %d: %v", i, err)
		}
		if i == 0 {
			first = ch
		}
		cancels = append(cancels, cancel)
	}
	if _, _, _, err := l.Subscribe(Filter{}, 1); !errors.Is(err, ErrTooManySubscribers) {
		t.Fatalf("subscriber 17: %v", err)
	}
	cancels[0]()
	cancels[0]() // a second cancel is harmless
	if _, ok := <-first; ok {
		t.Error("a cancelled tail's channel is open")
	}
	if _, _, _, err := l.Subscribe(Filter{}, 1); err != nil {
		t.Errorf("subscribing after a cancel: %v", err)
	}
	for _, b := range []int{-1, MaxBuffer + 1} {
		if _, _, _, err := l.Subscribe(Filter{}, b); !errors.Is(err, ErrConfig) {
			t.Errorf("buffer %d: %v", b, err)
		}
	}
	closeLogger(t, l)
	cancels[1]() // after Close too
	if _, _, _, err := l.Subscribe(Filter{}, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Close: %v", err)
	}
}
