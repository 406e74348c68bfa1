package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestChangeFromMatchesCompile applies random changes (adds, edits,
// extends chains, cycles and missing parents, conflicts, blocks)
// incrementally and checks every step against Change, the full compile of
// the same set: the same error, set, changes, and the same Resolve output
// (explanations included) on random requests.
func TestChangeFromMatchesCompile(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			blocks := []Block{{ID: "b1", Scope: map[string]string{"tenant_id": "tn_blocked"}, ExpiresAt: t0.Add(time.Hour)}}
			var base []Policy
			for i := range 40 {
				base = append(base, randPolicy(r, i, false))
			}
			prev, err := CompileSet(mustValid(t, base), blocks, 1)
			if err != nil {
				t.Fatal(err)
			}
			incremental, removing := 0, 0
			for step := range 150 {
				in := make([]Policy, 1+r.IntN(3))
				for i := range in {
					in[i] = randPolicy(r, r.IntN(60), true)
				}
				switch r.IntN(12) {
				case 0: // a new block
					blocks = append(slices.Clone(blocks), Block{ID: fmt.Sprintf("b%d", step+2), Scope: map[string]string{"route": pick(r, routes)}, ExpiresAt: t0.Add(time.Hour)})
				case 1: // one lifted (or expired)
					if len(blocks) > 0 {
						k := r.IntN(len(blocks))
						blocks = slices.Delete(slices.Clone(blocks), k, k+1)
					}
				}
				var remove []string
				if r.IntN(3) == 0 { // removals: a rollback's, or a delete's
					in = in[:r.IntN(len(in))]
					for range 1 + r.IntN(2) {
						if id := fmt.Sprintf("p%d", r.IntN(60)); !slices.ContainsFunc(in, func(p Policy) bool { return p.ID == id }) {
							remove = append(remove, id)
						}
					}
				}
				now := t0.Add(time.Duration(step) * time.Second)
				from, removed := Without(prev.ps, remove)
				want, wantSet, wantCh, wantErr := Change(from, in, false, now, blocks, uint64(step+2))
				if wantErr == nil {
					slices.Sort(removed)
					wantCh.Removed = slices.Compact(removed)
				}
				got, gotSet, gotCh, gotErr := ChangeFrom(prev, in, remove, false, now, blocks, uint64(step+2))
				if errLines(wantErr) != errLines(gotErr) {
					t.Fatalf("step %d: incoming %v, removing %v:\nfull:        %v\nincremental: %v", step, ids(SetOf(in)), remove, wantErr, gotErr)
				}
				if wantErr != nil {
					continue
				}
				if len(got.entries) > len(got.ps)+len(got.blocks) {
					incremental++
					if len(gotCh.Removed) > 0 {
						removing++
					}
				}
				if !reflect.DeepEqual(wantSet, gotSet) || !reflect.DeepEqual(wantCh, gotCh) {
					t.Fatalf("step %d: set or changes differ:\n%+v\n%+v", step, wantCh, gotCh)
				}
				if w, g := Diff(prev.ps, wantSet), DiffOf(prev, got, gotCh); w != g {
					t.Fatalf("step %d: diff:\n%s\nDiffOf:\n%s", step, w, g)
				}
				sameResolution(t, r, want, got, step)
				prev = got
			}
			t.Logf("%d steps incremental, %d of them removing", incremental, removing)
			if incremental < 20 || removing < 3 {
				t.Fatalf("only %d steps took the incremental path, %d of them removing", incremental, removing)
			}
		})
	}
}

func mustValid(t *testing.T, ps []Policy) []*Policy {
	t.Helper()
	// Drop what conflicts until the base set is valid.
	for {
		set := sortedByID(SetOf(ps))
		if _, _, err := build(set); err == nil {
			return set
		}
		ps = ps[:len(ps)-1]
	}
}

// errLines compares errors as sets of lines: the full check's order among
// one policy's conflicts follows map iteration.
func errLines(err error) string {
	if err == nil {
		return ""
	}
	lines := strings.Split(err.Error(), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func sameResolution(t *testing.T, r *rand.Rand, want, got *Snapshot, step int) {
	t.Helper()
	for range 50 {
		req := randRequest(r)
		w, g := want.Resolve(&req, t0), got.Resolve(&req, t0)
		if !reflect.DeepEqual(w.Applied, g.Applied) || !reflect.DeepEqual(w.Matched, g.Matched) ||
			!reflect.DeepEqual(w.Block, g.Block) || w.BlockPolicy != g.BlockPolicy {
			t.Fatalf("step %d: request %+v:\nfull:        %+v\nincremental: %+v", step, req, w, g)
		}
	}
	for _, p := range want.ps {
		wl, wk, _ := want.LayerKind(p.ID)
		gl, gk, ok := got.LayerKind(p.ID)
		gp, _ := got.Policy(p.ID)
		if !ok || wl != gl || wk != gk || !reflect.DeepEqual(gp, p) {
			t.Fatalf("step %d: policy %s: layer, kind or policy differ", step, p.ID)
		}
	}
}

var (
	tenantIDs = []string{"tn_0", "tn_1", "tn_2", "tn_3", "tn_blocked"}
	routes    = []string{"/v1/x", "/v1/y", "/v2/z"}
	ipList    = []string{"10.0.0.1", "10.0.0.2", "192.0.2.9"}
)

func randPolicy(r *rand.Rand, i int, extends bool) Policy {
	p := Policy{ID: fmt.Sprintf("p%d", i), Algorithm: "GCRA", Config: &Config{Rate: fmt.Sprintf("%d/s", 1+r.IntN(50))},
		Priority: r.IntN(3)}
	switch r.IntN(8) {
	case 0:
		p.Scope, p.Key = Scope{"tenant_id": {pick(r, tenantIDs)}}, []string{"tenant_id"}
	case 1:
		p.Scope, p.Key = Scope{"tenant_tier": {pick(r, []string{"PRO", "FREE"})}}, []string{"tenant_id"}
	case 2:
		p.Scope, p.Key = Scope{"route": {pick(r, routes)}}, []string{"route"}
	case 3:
		p.Scope, p.Key = Scope{"route": {"/v1/*"}}, []string{"route", "tenant_id"}
	case 4:
		p.Scope, p.Key = Scope{"ip": {pick(r, ipList)}}, []string{"ip"}
	case 5:
		p.Scope, p.Key = Scope{"custom.plan": {pick(r, []string{"gold", "tin"})}}, []string{"custom.plan"}
	case 6:
		p.Scope, p.Key = Scope{"tenant_id": {pick(r, tenantIDs), pick(r, tenantIDs)}}, []string{"tenant_id"}
	default:
		p.Key = []string{"api_key_id"}
	}
	switch r.IntN(10) {
	case 0:
		p.Mode = Shadow
	case 1:
		f := false
		p.Enabled = &f
	case 2:
		p.Rollout = &Rollout{Percent: 50}
	}
	if extends && r.IntN(4) == 0 {
		p.Extends = fmt.Sprintf("p%d", r.IntN(60))
		if r.IntN(2) == 0 {
			p.Algorithm, p.Config, p.Key = "", nil, nil
		}
	}
	return p
}

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

func randRequest(r *rand.Rand) Request {
	req := Request{TenantID: pick(r, tenantIDs), TenantTier: pick(r, []string{"PRO", "FREE", ""}), Route: pick(r, routes),
		IP: pick(r, ipList), APIKeyID: pick(r, []string{"k1", ""})}
	if r.IntN(2) == 0 {
		req.Custom = map[string]string{"plan": pick(r, []string{"gold", "tin"})}
	}
	return req
}

// TestDeleteFromMatchesDelete deletes random ids (unknown ones, parents
// of remaining policies) from random sets: DeleteFrom answers as Delete
// does, error for error, and its snapshot resolves as the full compile's.
func TestDeleteFromMatchesDelete(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	refused := 0
	for trial := range 200 {
		var base []Policy
		for i := range 40 {
			p := randPolicy(r, i, false)
			if i > 0 && r.IntN(3) == 0 { // extends an earlier one: a chain or a tree
				p.Extends = fmt.Sprintf("p%d", r.IntN(i))
			}
			base = append(base, p)
		}
		prev, err := CompileSet(mustValid(t, base), nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{"p99"} // no such policy
		if r.IntN(8) > 0 {
			ids = nil
			for range 1 + r.IntN(3) {
				ids = append(ids, prev.ps[r.IntN(len(prev.ps))].ID)
			}
		}
		wantSet, wantCh, wantErr := Delete(prev.ps, ids)
		got, gotSet, gotCh, gotErr := DeleteFrom(prev, ids, t0, nil, 2)
		if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) || errors.Is(wantErr, ErrNotFound) != errors.Is(gotErr, ErrNotFound) {
			t.Fatalf("trial %d: deleting %v:\nDelete:     %v\nDeleteFrom: %v", trial, ids, wantErr, gotErr)
		}
		if wantErr != nil {
			if refused++; refused < 5 {
				t.Log(wantErr)
			}
			continue
		}
		if !reflect.DeepEqual(wantSet, gotSet) || !reflect.DeepEqual(wantCh, gotCh) {
			t.Fatalf("trial %d: deleting %v: set or changes differ: %+v, %+v", trial, ids, wantCh, gotCh)
		}
		want, err := CompileSet(wantSet, nil, 2)
		if err != nil {
			t.Fatal(err)
		}
		sameResolution(t, r, want, got, trial)
	}
	if refused < 20 || refused > 180 {
		t.Fatalf("%d of 200 deletes refused: the trials do not cover both outcomes", refused)
	}
}

// TestPatchedFollowsDeltas: a gateway's copy patched with each DeltaFrom
// of a node's snapshots holds the node's set and resolves as the node
// does, through random puts, removals and new blocks (full recompiles on
// the node), and a delta names only what changed.
func TestPatchedFollowsDeltas(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 11))
	blocks := []Block{{ID: "b1", Scope: map[string]string{"tenant_id": "tn_blocked"}, ExpiresAt: t0.Add(time.Hour)}}
	var base []Policy
	for i := range 40 {
		base = append(base, randPolicy(r, i, false))
	}
	node, err := CompileSet(mustValid(t, base), blocks, 1)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := CompileSet(slices.Clone(node.ps), blocks, 1)
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for step := range 300 {
		in := make([]Policy, r.IntN(3))
		for i := range in {
			in[i] = randPolicy(r, r.IntN(60), true)
		}
		var remove []string
		if r.IntN(3) == 0 {
			remove = []string{fmt.Sprintf("p%d", r.IntN(60))}
		}
		if r.IntN(25) == 0 {
			blocks = append(slices.Clone(blocks), Block{ID: fmt.Sprintf("b%d", step+2), Scope: map[string]string{"route": "/v1/y"}, ExpiresAt: t0.Add(time.Hour)})
		}
		version := uint64(step + 2)
		next, _, _, err := ChangeFrom(node, in, remove, false, t0.Add(time.Duration(step)*time.Second), blocks, version)
		if err != nil {
			continue
		}
		put, removed, ok := next.DeltaFrom(node, 100)
		if !ok {
			t.Fatalf("step %d: no delta", step)
		}
		if len(put) > len(in) || len(removed) > len(remove) {
			t.Fatalf("step %d: a delta of %d puts and %d removals for %d and %d", step, len(put), len(removed), len(in), len(remove))
		}
		if gw, err = gw.Patched(put, removed, blocks, version); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if len(put)+len(removed) > 0 {
			deltas++
		}
		if !reflect.DeepEqual(gw.ps, next.ps) || gw.Version() != next.Version() {
			t.Fatalf("step %d: the gateway's set differs from the node's", step)
		}
		sameResolution(t, r, next, gw, step)
		node = next
	}
	if deltas < 100 {
		t.Fatalf("only %d deltas changed something", deltas)
	}
	if _, err := gw.Patched([]*Policy{node.ps[0], node.ps[0]}, nil, blocks, 999); err == nil {
		t.Error("a policy put twice was patched in")
	}
	if _, err := gw.Patched([]*Policy{node.ps[0]}, []string{node.ps[0].ID}, blocks, 999); err == nil {
		t.Error("a policy put and removed was patched in")
	}
}
