package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/tenants"
)

func assign(pairs ...string) tenants.List {
	var l tenants.List
	for i := 0; i < len(pairs); i += 2 {
		l = append(l, tenants.Assignment{TenantID: pairs[i], Plan: pairs[i+1]})
	}
	return l
}

func planOf(f *FSM, id string) string {
	p, ok := f.Tenants().Plan(id)
	if !ok {
		return "-"
	}
	return p
}

// TestMetaTenants: a tenant command that changes something bumps the
// assignment's version and hands the table over with the leader's time; a
// refused one, or one that changes nothing, keeps both; the policy set's
// version is not the assignment's.
func TestMetaTenants(t *testing.T) {
	type swap struct {
		version uint64
		stamped int64
	}
	var swaps []swap
	f := &FSM{OnTenants: func(tb *tenants.Table, stamped int64) { swaps = append(swaps, swap{tb.Version(), stamped}) }}
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano()
	res := applyMeta(t, f, Command{Op: OpTenantSet, Now: now, Tenants: assign("t_1", "FREE", "t_2", "plan_pro")})
	if res.Err != "" || *res.Tenants != (TenantResult{Version: 1, Tenants: 2, Set: 2}) {
		t.Fatalf("first set: %+v %+v", res, res.Tenants)
	}
	res = applyMeta(t, f, Command{Op: OpTenantSet, Now: now + 1, Tenants: assign("t_1", "PRO", "t_2", "plan_pro")})
	if *res.Tenants != (TenantResult{Version: 2, Tenants: 2, Set: 1, Unchanged: 1}) || planOf(f, "t_1") != "PRO" {
		t.Fatalf("moving t_1: %+v", res.Tenants)
	}
	res = applyMeta(t, f, Command{Op: OpTenantSet, Now: now + 2, Tenants: assign("t_1", "PRO")})
	if *res.Tenants != (TenantResult{Version: 2, Tenants: 2, Unchanged: 1}) {
		t.Fatalf("a set that changes nothing: %+v", res.Tenants)
	}
	res = applyMeta(t, f, Command{Op: OpTenantDelete, Now: now + 3, IDs: []string{"t_2", "t_9"}})
	if *res.Tenants != (TenantResult{Version: 3, Tenants: 1, Deleted: 1, Missing: 1}) || planOf(f, "t_2") != "-" {
		t.Fatalf("delete: %+v", res.Tenants)
	}
	if f.Policies().Version != 0 {
		t.Errorf("tenant commands moved the policy version to %d", f.Policies().Version)
	}
	want := []swap{{1, now}, {2, now + 1}, {3, now + 3}}
	if fmt.Sprint(swaps) != fmt.Sprint(want) {
		t.Errorf("tables handed over %v; want %v", swaps, want)
	}
}

// TestMetaTenantRefusals: each bound refuses the whole command, naming
// what is wrong, and leaves the assignment as it was.
func TestMetaTenantRefusals(t *testing.T) {
	defer func(n, p int) { maxTenants, maxPlans = n, p }(maxTenants, maxPlans)
	maxTenants, maxPlans = 3, 2
	f := &FSM{}
	applyMeta(t, f, Command{Op: OpTenantSet, Tenants: assign("t_1", "FREE", "t_2", "PRO")})
	many := make(tenants.List, MaxTenantChange+1)
	for i := range many {
		many[i] = tenants.Assignment{TenantID: fmt.Sprint("t_", i), Plan: "P"}
	}
	long := strings.Repeat("x", 200)
	big := make(tenants.List, 1000)
	for i := range big {
		big[i] = tenants.Assignment{TenantID: fmt.Sprint(long, i), Plan: "P"}
	}
	for _, tc := range []struct {
		c    Command
		want string
	}{
		{Command{Op: OpTenantSet}, "tenants: assignments: empty: name at least one tenant"},
		{Command{Op: OpTenantDelete}, "tenants: tenant_ids: empty"},
		{Command{Op: OpTenantSet, Tenants: many}, "tenants: assignments: 5001 tenants, at most 5000 a change"},
		{Command{Op: OpTenantSet, Tenants: big}, "tenants: assignments: 211890 bytes of tenants, at most 196608 a change"},
		{Command{Op: OpTenantSet, Tenants: assign("t_3", "FREE", "t_4", "")}, "tenants: assignments[1].plan: required"},
		{Command{Op: OpTenantDelete, IDs: []string{"t_1", "a\x00"}}, "tenants: tenant_ids[1]: control character U+0000"},
		{Command{Op: OpTenantSet, Tenants: assign("t_3", "FREE", "t_4", "FREE")}, "would hold 4 tenants, more than the cluster's maximum of 3"},
		{Command{Op: OpTenantSet, Tenants: assign("t_3", "ENTERPRISE")}, "would name 3 plans, more than the cluster's maximum of 2"},
	} {
		res := applyMeta(t, f, tc.c)
		if res.Code != CodeInvalid || !strings.Contains(res.Err, tc.want) {
			t.Errorf("%s of %d: %+v; want refused with %q", tc.c.Op, len(tc.c.Tenants)+len(tc.c.IDs), res, tc.want)
		}
	}
	if tb := f.Tenants(); tb.Version() != 1 || tb.Len() != 2 {
		t.Errorf("after the refusals: version %d, %d tenants; want 1 and 2", tb.Version(), tb.Len())
	}
	// Moving a tenant within the bounds is no growth.
	if res := applyMeta(t, f, Command{Op: OpTenantSet, Tenants: assign("t_3", "FREE", "t_1", "PRO")}); res.Err != "" {
		t.Errorf("a third tenant on a plan in use: %s", res.Err)
	}
}

// TestMetaTenantSnapshot: the snapshot carries the assignment and its
// version, and restores it before the policies (so a node's first
// snapshot after a restore resolves with both); one without tenants (every
// snapshot from before them) restores none.
func TestMetaTenantSnapshot(t *testing.T) {
	f := &FSM{}
	applyMeta(t, f, Command{Op: OpApply, Now: 1, Policies: mustParse(t, metaDoc)})
	applyMeta(t, f, Command{Op: OpTenantSet, Now: 2, Tenants: assign("t_1", "FREE", "t_2", "PRO")})
	applyMeta(t, f, Command{Op: OpTenantSet, Now: 3, Tenants: assign("t_2", "FREE")})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(snap), `"tenants":{"version":2,"plans":{"FREE":[`) {
		t.Errorf("snapshot %s", snap)
	}
	var order []string
	g := &FSM{}
	g.OnTenants = func(tb *tenants.Table, stamped int64) {
		order = append(order, fmt.Sprintf("tenants v%d at %d", tb.Version(), stamped))
	}
	g.OnPolicies = func(s *policy.Snapshot, _ int64) { order = append(order, fmt.Sprintf("policies v%d", s.Version())) }
	if err := g.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if tb := g.Tenants(); tb.Version() != 2 || tb.Len() != 2 || planOf(g, "t_2") != "FREE" {
		t.Fatalf("restored version %d, %d tenants, t_2 on %s", tb.Version(), tb.Len(), planOf(g, "t_2"))
	}
	if got := strings.Join(order, ", "); got != "tenants v2 at 0, policies v1" {
		t.Errorf("hooks on restore: %s", got)
	}
	if err := g.Restore([]byte(goldenSnapshot)); err != nil || g.Tenants() != nil {
		t.Errorf("an old snapshot restored %v tenants (%v); want none", g.Tenants().Len(), err)
	}
	var empty FSM
	if b, _ := empty.Snapshot(); strings.Contains(string(b), "tenants") {
		t.Errorf("a state that never had tenants snapshots %s", b)
	}
}

// TestWaitTenants: a waiter wakes when the version it waits for is
// applied, and gives up when its context ends.
func TestWaitTenants(t *testing.T) {
	f := &FSM{}
	done := make(chan bool, 1)
	go func() { done <- f.WaitTenants(context.Background(), 1) }()
	applyMeta(t, f, Command{Op: OpTenantSet, Tenants: assign("t_1", "FREE")})
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("the waiter for version 1 reported false")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was never woken")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- f.WaitTenants(ctx, 2) }()
	cancel()
	if <-done {
		t.Fatal("a waiter whose context ended reported true")
	}
}

// TestTenantCommandFormat: a tenant-set command carries its assignments as
// pairs, in an entry far below the message bound at the largest change.
func TestTenantCommandFormat(t *testing.T) {
	b, _ := json.Marshal(Command{Op: OpTenantSet, Now: 5, Tenants: assign("t_1", "PRO")})
	if want := `{"op":"tenant-set","now":5,"tenants":[["t_1","PRO"]]}`; string(b) != want {
		t.Errorf("%s; want %s", b, want)
	}
	l := make(tenants.List, MaxTenantChange)
	for i := range l {
		l[i] = tenants.Assignment{TenantID: fmt.Sprintf("tenant-%09d", i), Plan: "plan_enterprise"}
	}
	b, _ = json.Marshal(Command{Op: OpTenantSet, Now: time.Now().UnixNano(), Tenants: l})
	if err := CheckTenantChange(&Command{Op: OpTenantSet, Tenants: l}); err != nil || len(b) > MaxTenantChangeBytes+100 {
		t.Errorf("a chunk of %d: %d bytes (%v)", len(l), len(b), err)
	}
}
