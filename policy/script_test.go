package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy/tenants"
)

// t0 is the scripts' time origin.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestScripts runs the data-driven scripts in testdata/scripts/. Rewrite the expected
// output with: go test ./policy -run TestScripts -rewrite
//
// Directives:
//
//	load file=F                      parse and compile testdata/F
//	policies [name=N]                parse and compile the input (a YAML or JSON document)
//	parse [name=N]                   parse only; print the policies as canonical JSON
//	block id=I for=D [desc=value...] add an emergency block expiring D after t0
//	resolve [at=D] [desc=value...]   resolve a request (risk_score, idempotency_key and cost too)
//	explain [desc=value...]          resolve, and print each match's layer and kind and where they come from
//	review [name=N] [prune]          parse the input and review it against the set: the refusal, or the warnings
//	tenants [source=S] [id=plan...]  assign tenants to plans (plan "-": remove the assignment);
//	                                 source=request lets a request's own tenant_tier win
//
// A value "-" stands for the empty string.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		s := &script{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := s.run(d)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			return out
		})
	})
}

type script struct {
	ps      []Policy
	blocks  []Block
	snap    *Snapshot
	tenants *tenants.Table
	source  TierSource
}

func args(d *datadriven.TestData) map[string]string {
	m := map[string]string{}
	for _, a := range d.CmdArgs {
		v := strings.Join(a.Vals, ",")
		if v == "-" {
			v = ""
		}
		m[a.Key] = v
	}
	return m
}

func (s *script) run(d *datadriven.TestData) (string, error) {
	a := args(d)
	switch d.Cmd {
	case "load":
		data, err := os.ReadFile(filepath.Join("testdata", a["file"]))
		if err != nil {
			return "", err
		}
		return s.load(a["file"], data), nil
	case "policies":
		return s.load(or(a["name"], "policies.yaml"), []byte(d.Input)), nil
	case "parse":
		ps, err := Parse(or(a["name"], "policies.yaml"), []byte(d.Input))
		if err != nil {
			return err.Error(), nil
		}
		var b strings.Builder
		for i := range ps {
			b.Write(canonical(&ps[i]))
			b.WriteByte('\n')
		}
		return b.String(), nil
	case "block":
		return s.block(a)
	case "resolve":
		return s.resolve(a)
	case "explain":
		return s.explain(a)
	case "review":
		_, prune := a["prune"]
		return s.review(or(a["name"], "policies.yaml"), []byte(d.Input), prune), nil
	case "tenants":
		return s.assign(a)
	}
	return "", fmt.Errorf("unknown directive %q", d.Cmd)
}

func (s *script) load(name string, data []byte) string {
	ps, err := Parse(name, data)
	if err != nil {
		return err.Error()
	}
	snap, err := Compile(ps, s.blocks, 1)
	if err != nil {
		return err.Error()
	}
	s.ps, s.snap = ps, snap.WithTenants(s.tenants, s.source)
	return fmt.Sprintf("ok: %d policies", snap.Len())
}

func (s *script) block(a map[string]string) (string, error) {
	d, err := time.ParseDuration(a["for"])
	if err != nil {
		return "", err
	}
	b := Block{ID: a["id"], ExpiresAt: t0.Add(d), Scope: map[string]string{}}
	for k, v := range a {
		if k != "id" && k != "for" {
			b.Scope[k] = v
		}
	}
	snap, err := Compile(s.ps, append(s.blocks, b), 1)
	if err != nil {
		return err.Error(), nil
	}
	s.blocks, s.snap = append(s.blocks, b), snap.WithTenants(s.tenants, s.source)
	return "ok", nil
}

func (s *script) assign(a map[string]string) (string, error) {
	var set []tenants.Assignment
	var del []string
	for _, id := range sortedKeys(a) {
		switch {
		case id == "source":
			s.source = map[string]TierSource{"request": TierFromRequest, "assignment": TierFromAssignment}[a[id]]
		case a[id] == "":
			del = append(del, id)
		default:
			set = append(set, tenants.Assignment{TenantID: id, Plan: a[id]})
		}
	}
	s.tenants, _ = s.tenants.Set(set)
	s.tenants, _ = s.tenants.Delete(del)
	s.snap = s.snap.WithTenants(s.tenants, s.source)
	return fmt.Sprintf("ok: %d tenants", s.tenants.Len()), nil
}

func (s *script) resolve(a map[string]string) (string, error) {
	at := t0
	var r Request
	for _, k := range sortedKeys(a) {
		if k == "at" {
			d, err := time.ParseDuration(a[k])
			if err != nil {
				return "", err
			}
			at = t0.Add(d)
			continue
		}
		if err := r.Set(k, a[k]); err != nil {
			return err.Error(), nil
		}
	}
	if err := r.Validate(); err != nil {
		return err.Error(), nil
	}
	out := fmtResolution(s.snap.Resolve(&r, at))
	if note := s.snap.TierNote(&r); note != "" {
		out = note + "\n" + out
	}
	return out, nil
}

func (s *script) explain(a map[string]string) (string, error) {
	var r Request
	for _, k := range sortedKeys(a) {
		if err := r.Set(k, a[k]); err != nil {
			return err.Error(), nil
		}
	}
	var b strings.Builder
	for _, m := range s.snap.Resolve(&r, t0).Matched {
		fmt.Fprintf(&b, "%s: layer %s (%s), kind %s (%s)\n", m.PolicyID, m.Layer, m.LayerFrom, m.Kind, m.KindFrom)
	}
	return b.String(), nil
}

// review applies nothing: it shows what apply would say of the document.
func (s *script) review(name string, data []byte, prune bool) string {
	ps, err := Parse(name, data)
	if err != nil {
		return err.Error()
	}
	ws, err := s.snap.Review(ps, prune)
	if err != nil {
		return "refused:\n" + err.Error()
	}
	if len(ws) == 0 {
		return "no warnings"
	}
	return "warning: " + strings.Join(ws, "\nwarning: ")
}

func fmtResolution(res Resolution) string {
	var b strings.Builder
	if res.Block != nil {
		fmt.Fprintf(&b, "blocked by emergency block %s\n", res.Block.ID)
	}
	if res.BlockPolicy != "" {
		fmt.Fprintf(&b, "blocked by policy %s\n", res.BlockPolicy)
	}
	for _, e := range res.Applied {
		fmt.Fprintf(&b, "apply %s layer=%s kind=%s mode=%s %s %s", e.PolicyID, e.Layer, e.Kind, e.Mode, e.Consistency, e.Fail)
		if e.EmergencyCap != nil {
			fmt.Fprintf(&b, " cap=%s", fmtLimit(*e.EmergencyCap))
		}
		if e.RiskCut != 0 {
			fmt.Fprintf(&b, " risk-cut=%v", e.RiskCut)
		}
		b.WriteByte('\n')
		for _, it := range e.Items {
			fmt.Fprintf(&b, "  %s key=%q %s cost=%d", it.Name, it.Key, fmtLimit(it.Limit), it.Cost)
			if it.IdempotencyKey != "" {
				fmt.Fprintf(&b, " idem=%q", it.IdempotencyKey)
			}
			if it.Level != "" {
				fmt.Fprintf(&b, " level=%s", it.Level)
			}
			if d := it.Delay; d.Throttled() {
				fmt.Fprintf(&b, " delay=burst:%d,interval:%s,friction:%s,max:%s", d.Burst, d.Interval, d.Friction, d.Max)
			}
			b.WriteByte('\n')
		}
	}
	for _, m := range res.Matched {
		sel := " "
		if m.Selected {
			sel = "*"
		}
		fmt.Fprintf(&b, "%s %s: %s\n", sel, m.PolicyID, m.Why)
	}
	if b.Len() == 0 {
		return "nothing applies"
	}
	return b.String()
}

func fmtLimit(l fsm.Limit) string {
	s := fmt.Sprintf("%s %d/%s", l.Algorithm, l.Limit, l.Period)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst=%d", l.Burst)
	}
	return s
}
