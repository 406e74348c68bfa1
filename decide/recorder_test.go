package decide

import (
	"context"
	"sync"
	"testing"
)

type recording struct {
	mu  sync.Mutex
	got []Decided
}

func (r *recording) Decided(_ context.Context, d *Decided) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := *d
	r.got = append(r.got, cp)
}

// TestRecorder: every decided request reaches the recorder with its mode,
// answer and each policy's bucket key; a dry run decided nothing and is
// not recorded; a request no policy matched is recorded as decided by
// policy.
func TestRecorder(t *testing.T) {
	c := newClock()
	f := newShards(t, 2, c)
	rec := &recording{}
	e := engine(f, c, func(cfg *Config) { cfg.Policies = compile(t, plans); cfg.Recorder = rec; leased(cfg) })
	defer e.Close()
	check := func(dry bool, d *Descriptors) *Answer {
		t.Helper()
		ans, err := e.Check(context.Background(), &Request{ID: "r1", DryRun: dry, Descriptors: d})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	free := &Descriptors{TenantID: "t1", TenantTier: "FREE", IP: "192.0.2.1"}
	check(true, free)
	for range 3 {
		check(false, free)
	}
	check(false, &Descriptors{TenantID: "t2", TenantTier: "GOLD"})
	if len(rec.got) != 4 {
		t.Fatalf("%d recorded, want 4 (three checks and the unmatched one, not the dry run)", len(rec.got))
	}
	last := rec.got[2]
	if last.Request.ID != "r1" || last.Answer.Decision != Deny || last.Answer.AppliedPolicyID != "plan" || last.Mode != "mixed" {
		t.Errorf("third check recorded as %+v / %+v", last, last.Answer)
	}
	keys := map[string]string{}
	for _, pr := range last.Answer.Policies {
		keys[pr.PolicyID] = pr.Key
	}
	if keys["plan"] != "t1" || keys["soft_ip"] != "192.0.2.1" || keys["trial"] != "t1" {
		t.Errorf("policy keys %v", keys)
	}
	if np := rec.got[3]; np.Mode != "policy" || np.Answer.Reason != NoPolicy || np.Took < 0 {
		t.Errorf("unmatched recorded as %+v", np)
	}
}
