package decide

import (
	"context"
	"testing"
	"time"
)

const rememberingPolicy = `
policies:
  - policy_id: api
    key: [ip]
    algorithm: TOKEN_BUCKET
    config: { limit: 100/h }
    risk:
      bands: [{ above: 0.9, cut: 0.8 }, { min: 0.7, cut: 0.4 }]
      max_cut: 0.6
      memory: { half_life: 10m }
`

// TestRiskMemory: a high score is remembered for its subject and decays
// by half-life; requests without a score, or with a lower one, are cut by
// what is remembered; max_cut bounds the cut; a dry run learns nothing;
// another subject is unaffected.
func TestRiskMemory(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, func(cfg *Config) { cfg.Policies = compile(t, rememberingPolicy) })
	defer e.Close()
	limitFor := func(ip string, score *float64, dry bool) int64 {
		t.Helper()
		ans, err := e.Check(context.Background(), &Request{DryRun: dry, Descriptors: &Descriptors{IP: ip, RiskScore: score}})
		if err != nil {
			t.Fatal(err)
		}
		return ans.Policies[0].Limit
	}
	score := func(s float64) *float64 { return &s }
	if l := limitFor("192.0.2.1", nil, false); l != 100 {
		t.Fatalf("no score, nothing remembered: limit %d, want 100", l)
	}
	// A dry run with a high score teaches nothing.
	if l := limitFor("192.0.2.1", score(0.95), true); l != 40 {
		t.Fatalf("dry run at 0.95: limit %d, want 40 (the 0.8 cut bounded by max_cut 0.6)", l)
	}
	if l := limitFor("192.0.2.1", nil, false); l != 100 {
		t.Fatalf("after a dry run: limit %d, want 100", l)
	}
	if l := limitFor("192.0.2.1", score(0.95), false); l != 40 {
		t.Fatalf("0.95: limit %d, want 40", l)
	}
	// Remembered: no score, or a low one, still gets the cut.
	if l := limitFor("192.0.2.1", nil, false); l != 40 {
		t.Fatalf("right after 0.95, no score: limit %d, want 40", l)
	}
	if l := limitFor("192.0.2.1", score(0.1), false); l != 40 {
		t.Fatalf("right after 0.95, score 0.1: limit %d, want 40", l)
	}
	if l := limitFor("192.0.2.2", nil, false); l != 100 {
		t.Fatalf("another subject: limit %d, want 100", l)
	}
	// One half-life: 0.475, below every band.
	c.Advance(10 * time.Minute)
	if l := limitFor("192.0.2.1", nil, false); l != 100 {
		t.Fatalf("a half-life later (0.475): limit %d, want 100", l)
	}
	// 0.8 decays to 0.8*2^-0.1 = 0.746 after a minute: still the 0.7 band.
	limitFor("192.0.2.1", score(0.8), false)
	c.Advance(time.Minute)
	if l := limitFor("192.0.2.1", nil, false); l != 60 {
		t.Fatalf("a minute after 0.8: limit %d, want 60", l)
	}
	c.Advance(time.Minute) // 0.8*2^-0.2 = 0.696
	if l := limitFor("192.0.2.1", nil, false); l != 100 {
		t.Fatalf("two minutes after 0.8: limit %d, want 100", l)
	}
}

// TestRiskMemoryBounded: a full memory forgets the weakest of a sample,
// counted.
func TestRiskMemoryBounded(t *testing.T) {
	obs := newObserver()
	m := newRiskMemory(4, obs)
	now := time.Unix(0, 0)
	for i, s := range []float64{0.9, 0.8, 0.7, 0.6, 0.95} {
		l := learner{m}
		if got, ok := l.Recall(string(rune('a'+i)), s, true, time.Hour, now); !ok || got != s {
			t.Fatalf("recall %d: %v %v", i, got, ok)
		}
	}
	if n := m.len(); n != 4 {
		t.Fatalf("%d remembered, want the bound 4", n)
	}
	if n := obs.get("risk-forgotten"); n != 1 {
		t.Fatalf("%d forgotten counted, want 1", n)
	}
	if got, ok := (lookup{m}).Recall("d", 0, false, time.Hour, now); ok {
		t.Fatalf("the weakest (0.6) is still remembered: %v", got)
	}
}
