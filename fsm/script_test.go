package fsm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/datadriven"
)

// t0 is the scripts' time origin: midnight, so epoch-aligned windows start
// at round offsets from it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// TestScripts runs the data-driven scripts in testdata/. Rewrite the expected
// output with: go test ./fsm -run TestScripts -rewrite
//
// Directives:
//
//	config [max-jump=D] [dedupe=D] [max-ttl=D]   new machine with that config
//	limit name=N alg=A limit=L period=D [burst=B] name a limit for l=N
//	<op> at=D [op args]                           one op in its own command
//	batch at=D                                    one command, an op per input line
//	now                                           the machine's time
//	snapshot                                      round-trip through Snapshot/Restore
//	filter keys=K1,K2                             whether the last credit's filter may contain each key
//
// Ops: take, peek, refund, reset, grant, return, credit, with args key=K
// ("|" in K stands for NUL; a credit's key is its scope) l=N n=COST
// idem=K holder=H ttl=D lease=ID group=G taken=D (a refund's take time). Times are offsets from t0; at=-1s is before it.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{m: New(Config{}), limits: map[string]Limit{}}
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
	m      *Machine
	limits map[string]Limit
	filter Filter // of the last credit granted
}

func (s *script) run(d *datadriven.TestData) (string, error) {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	switch d.Cmd {
	case "config":
		var c Config
		var err error
		c.MaxClockJump, err = optDur(args, "max-jump", err)
		c.DedupeWindow, err = optDur(args, "dedupe", err)
		c.MaxLeaseTTL, err = optDur(args, "max-ttl", err)
		s.m = New(c)
		return "ok", err
	case "limit":
		l, err := parseLimit(args)
		s.limits[args["name"]] = l
		return "ok", err
	case "now":
		return fmtAt(s.m.Now()), nil
	case "snapshot":
		return s.roundTrip()
	case "filter":
		var out []string
		for _, k := range strings.Split(args["keys"], ",") {
			out = append(out, fmt.Sprintf("%s=%t", k, s.filter.MayContain(xxhash.Sum64String(k))))
		}
		return strings.Join(out, " "), nil
	case "batch":
		cmd := &Command{}
		var err error
		cmd.Now, err = at(args)
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			f := strings.Fields(line)
			la := map[string]string{}
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				la[k] = v
			}
			op, err2 := s.parseOp(f[0], la)
			if err == nil {
				err = err2
			}
			cmd.Ops = append(cmd.Ops, op)
		}
		if err != nil {
			return "", err
		}
		return s.apply(cmd), nil
	default:
		op, err := s.parseOp(d.Cmd, args)
		if err != nil {
			return "", err
		}
		now, err := at(args)
		if err != nil {
			return "", err
		}
		return s.apply(&Command{Now: now, Ops: []Op{op}}), nil
	}
}

func (s *script) apply(cmd *Command) string {
	var b strings.Builder
	for _, r := range s.m.Apply(cmd, nil) {
		if !r.Filter.Empty() {
			s.filter = r.Filter
		}
		b.WriteString(fmtResult(r))
		b.WriteByte('\n')
	}
	return b.String()
}

func (s *script) roundTrip() (string, error) {
	var b1, b2 strings.Builder
	if err := s.m.Snapshot(&b1); err != nil {
		return "", err
	}
	m2 := New(s.m.cfg)
	if err := m2.Restore(strings.NewReader(b1.String())); err != nil {
		return "", err
	}
	if err := m2.Snapshot(&b2); err != nil {
		return "", err
	}
	if b1.String() != b2.String() {
		return "", fmt.Errorf("snapshot of restored machine differs")
	}
	s.m = m2
	return fmt.Sprintf("ok %d bytes", b1.Len()), nil
}

func (s *script) parseOp(kind string, a map[string]string) (Op, error) {
	var op Op
	for k := OpTake; k < numOps; k++ {
		if k.String() == kind {
			op.Kind = k
		}
	}
	if kind == "bogus" {
		op.Kind = numOps
	} else if op.Kind == opUnspecified {
		return op, fmt.Errorf("unknown directive %q", kind)
	}
	// "|" stands for the NUL that separates a limit's name from its key.
	op.Key = strings.ReplaceAll(a["key"], "|", "\x00")
	if n, ok := a["l"]; ok {
		l, found := s.limits[n]
		if !found {
			return op, fmt.Errorf("no limit named %q", n)
		}
		op.Limit = l
	}
	var err error
	op.Cost, err = optInt(a, "n", 1, err)
	if op.Kind == OpReturn {
		op.Cost, err = optInt(a, "n", 0, err)
	}
	op.IdempotencyKey, op.Holder = a["idem"], a["holder"]
	op.TTL, err = optDur(a, "ttl", err)
	lease, err := optInt(a, "lease", 0, err)
	op.Lease = uint64(lease)
	group, err := optInt(a, "group", 0, err)
	op.Group = uint32(group)
	if taken, ok := a["taken"]; ok && err == nil {
		var d time.Duration
		d, err = time.ParseDuration(taken)
		op.At = t0 + int64(d)
	}
	return op, err
}

func parseLimit(a map[string]string) (Limit, error) {
	l := Limit{}
	alg, err := ParseAlgorithm(a["alg"])
	if a["alg"] == "bogus" {
		alg, err = Algorithm(99), nil
	}
	l.Algorithm = alg
	l.Limit, err = optInt(a, "limit", 0, err)
	l.Burst, err = optInt(a, "burst", 0, err)
	l.Period, err = optDur(a, "period", err)
	return l, err
}

func at(a map[string]string) (int64, error) {
	d, err := optDur(a, "at", nil)
	return t0 + int64(d), err
}

func optDur(a map[string]string, k string, err error) (time.Duration, error) {
	v, ok := a[k]
	if !ok || err != nil {
		return 0, err
	}
	return time.ParseDuration(v)
}

func optInt(a map[string]string, k string, def int64, err error) (int64, error) {
	v, ok := a[k]
	if !ok || err != nil {
		return def, err
	}
	return strconv.ParseInt(v, 10, 64)
}

func fmtAt(ns int64) string {
	return "t0+" + time.Duration(ns-t0).String()
}

func fmtResult(r Result) string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	var b strings.Builder
	if r.Allowed {
		b.WriteString("allow")
	} else {
		b.WriteString("deny")
	}
	fmt.Fprintf(&b, " limit=%d remaining=%d reset=%s retry=%s", r.Limit, r.Remaining, r.ResetAfter, r.RetryAfter)
	if r.Delay > 0 {
		fmt.Fprintf(&b, " delay=%s", r.Delay)
	}
	if r.Lease > 0 || r.Granted > 0 {
		fmt.Fprintf(&b, " lease=%d granted=%d", r.Lease, r.Granted)
	}
	if r.Expires > 0 {
		fmt.Fprintf(&b, " expires=%s", fmtAt(r.Expires))
	}
	if r.Replayed {
		b.WriteString(" replayed")
	}
	if r.Refunded {
		b.WriteString(" refunded")
	}
	return b.String()
}
