package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quorate/quorate/chaos/check"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/fsm/exact"
)

// Report is what a run found. It is written to report.json and, for
// people, report.txt.
type Report struct {
	Seed       uint64        `json:"seed"`
	Duration   time.Duration `json:"duration"`
	Nodes      int           `json:"nodes"`
	Addresses  []string      `json:"addresses"`
	Start      time.Time     `json:"start"`
	End        time.Time     `json:"end"`
	Partitions string        `json:"partitions"` // "enabled", or why not
	Faults     []Fault       `json:"faults"`

	StrictOps     int `json:"strict_ops"`
	LeasedOps     int `json:"leased_ops"`
	StrictUnknown int `json:"strict_unknown"`
	LeasedFailed  int `json:"leased_failed"` // errors and timeouts of leased checks

	// The filler's strict checks (see filler.go): sent, decided in the log,
	// and answered with another request's result (a violation).
	FillerOps     int    `json:"filler_ops"`
	FillerDecided int    `json:"filler_decided"`
	FillerMisfit  int    `json:"filler_misfit"`
	FirstMisfit   string `json:"first_misfit,omitempty"`
	// Log entries the clients saw decide their strict checks; those that
	// carried several requests; and those where a checked key's request
	// shared the entry with another.
	Entries       int `json:"entries"`
	SharedEntries int `json:"shared_entries"`
	CheckedShared int `json:"checked_shared"`

	// Gaps are the longest stretches of wall-clock time, per mode, in which
	// no check was decided (ALLOW or DENY) anywhere in the cluster.
	StrictGap   time.Duration `json:"strict_gap"`
	LeasedGap   time.Duration `json:"leased_gap"`
	StrictGapAt time.Time     `json:"strict_gap_at"`
	LeasedGapAt time.Time     `json:"leased_gap_at"`

	Strict []StrictKeyReport `json:"strict_keys"`
	Leased []LeasedKeyReport `json:"leased_keys"`

	// Durability is "checked" after the full-cluster restart, or why not.
	Durability string `json:"durability"`

	Violations []string `json:"violations"`
	Replay     string   `json:"replay"`
}

// StrictKeyReport is the verdict on one strict key's history.
type StrictKeyReport struct {
	Key       string       `json:"key"`
	Limit     fsm.Limit    `json:"limit"`
	Ops       int          `json:"ops"`
	Admission check.Report `json:"admission"`
	// Linearizable is "ok", "VIOLATION" or "unknown" (the search timed out)
	// for the workload's history; Durable the same for that history plus
	// the check after the full restart ("not checked" without it).
	Linearizable  string `json:"linearizable"`
	Durable       string `json:"durable"`
	Visualization string `json:"visualization,omitempty"`
	History       string `json:"history"` // the recorded operations, as JSON
	CheckTime     string `json:"check_time"`
	// Shards are the shards that decided the key, in order: more than one
	// when a split moved it.
	Shards []int `json:"shards"`
}

// LeasedKeyReport is the verdict on one leased key.
type LeasedKeyReport struct {
	Key            string    `json:"key"`
	Limit          fsm.Limit `json:"limit"`
	Allowed        int       `json:"allowed"`
	Denied         int       `json:"denied"`
	Unavailable    int       `json:"unavailable"`      // DENY because the store was unavailable
	Failed         int       `json:"failed"`           // errors and timeouts
	AllowedByLimit int64     `json:"allowed_by_limit"` // over the whole run
	// UnderAdmitted is how far the ALLOWs fall short of the smaller of
	// AllowedByLimit and the checks made (the demand).
	UnderAdmitted        int64 `json:"under_admitted"`
	OverAdmitted         int   `json:"over_admitted"` // ALLOWs beyond the prefix bound
	MaxExcess            int64 `json:"max_excess"`
	WorstAt              int64 `json:"worst_at,omitempty"` // Unix ns of the return of the worst ALLOW
	ClockSkewSlackMaxSec int64 `json:"clock_skew_slack_max_sec,omitempty"`
}

// checkLeased applies the prefix bound to a leased key: every budget is
// taken from the bucket after the first call on the (fresh) key, so by
// any time t at most burst + floor((t - start)·limit/period) units can have
// been admitted, where start is that first call. A clock skewed forward by
// s lets the state machine's time run s ahead, so t is taken s later from
// the skew's start on (slack). Over the whole run, the same formula with
// the run's end is what the limit allowed; the shortfall of the ALLOWs
// below that, or below the demand when it was smaller, is reported as
// under-admission.
func checkLeased(k *leasedKey, end time.Time, slack func(t int64) int64) LeasedKeyReport {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := LeasedKeyReport{Key: k.name, Limit: k.limit, Allowed: len(k.allows), Denied: k.denied,
		Unavailable: k.unavailable, Failed: k.unknown}
	if k.first == 0 {
		return r
	}
	bound := func(t int64) int64 {
		return k.limit.Capacity() + exact.MulDiv(max(0, t-k.first), k.limit.Limit, int64(k.limit.Period))
	}
	allows := slices.Clone(k.allows)
	slices.SortFunc(allows, func(a, b span) int { return cmp.Compare(a.Return, b.Return) })
	for i, a := range allows {
		s := slack(a.Return)
		r.ClockSkewSlackMaxSec = max(r.ClockSkewSlackMaxSec, s/int64(time.Second))
		if excess := int64(i+1) - bound(a.Return+s); excess > 0 {
			r.OverAdmitted++
			if excess > r.MaxExcess {
				r.MaxExcess, r.WorstAt = excess, a.Return
			}
		}
	}
	r.AllowedByLimit = bound(end.UnixNano())
	demand := int64(r.Allowed + r.Denied + r.Unavailable + r.Failed)
	r.UnderAdmitted = max(0, min(r.AllowedByLimit, demand)-int64(len(allows)))
	return r
}

// longestGap is the longest time in [from, to] without one of times, and
// when it began.
func longestGap(times []int64, from, to time.Time) (time.Duration, time.Time) {
	t := slices.Clone(times)
	slices.Sort(t)
	prev, gap, at := from.UnixNano(), int64(0), from.UnixNano()
	for _, x := range append(t, to.UnixNano()) {
		if x < prev {
			continue
		}
		if x-prev > gap {
			gap, at = x-prev, prev
		}
		prev = x
	}
	return time.Duration(gap), time.Unix(0, at)
}

// linearizable runs the bounded search and names its verdict.
func linearizable(l fsm.Limit, ops []check.Operation, timeout time.Duration) (string, porcupine.LinearizationInfo) {
	res, info := check.CheckLinearizableTimeout(l, ops, timeout)
	switch res {
	case porcupine.Ok:
		return "ok", info
	case porcupine.Illegal:
		return "VIOLATION", info
	}
	return "unknown", info
}

// OK reports whether the run found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// judge fills in Violations from the verdicts.
func (r *Report) judge() {
	for _, k := range r.Strict {
		if k.Linearizable == "VIOLATION" {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: not linearizable (see %s)", k.Key, k.Visualization))
		}
		if k.Durable == "VIOLATION" {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: lost state across the full restart (see %s)", k.Key, k.Visualization))
		}
		if !k.Admission.OK() {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: over-admitted: %s", k.Key, k.Admission))
		}
	}
	if r.FillerMisfit > 0 {
		r.Violations = append(r.Violations, fmt.Sprintf("%d strict answers went to the wrong request: %s", r.FillerMisfit, r.FirstMisfit))
	}
	for _, k := range r.Leased {
		if k.OverAdmitted > 0 {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: leased over-admission: %d ALLOWs above the prefix bound, max excess %d at %s",
				k.Key, k.OverAdmitted, k.MaxExcess, time.Unix(0, k.WorstAt).UTC().Format(time.RFC3339Nano)))
		}
	}
}

func (r *Report) overAdmitted() int {
	n := 0
	for _, k := range r.Strict {
		n += k.Admission.OverAdmitted
	}
	for _, k := range r.Leased {
		n += k.OverAdmitted
	}
	return n
}

func (r *Report) count(f func(StrictKeyReport) string) int {
	n := 0
	for _, k := range r.Strict {
		if f(k) == "ok" {
			n++
		}
	}
	return n
}

// Summary is the one-line verdict printed last.
func (r *Report) Summary() string {
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	return fmt.Sprintf("chaos: %s seed=%d duration=%s faults=%d ops=%d (strict %d, leased %d) over-admitted=%d shared-entries=%d gaps strict=%s leased=%s linearizable=%d/%d durable=%d/%d",
		verdict, r.Seed, r.Duration, r.injected(), r.StrictOps+r.LeasedOps, r.StrictOps, r.LeasedOps, r.overAdmitted(), r.CheckedShared,
		r.StrictGap.Round(100*time.Millisecond), r.LeasedGap.Round(100*time.Millisecond),
		r.count(func(k StrictKeyReport) string { return k.Linearizable }), len(r.Strict),
		r.count(func(k StrictKeyReport) string { return k.Durable }), len(r.Strict))
}

// injected counts the faults that were applied (not skipped).
func (r *Report) injected() int {
	n := 0
	for _, f := range r.Faults {
		if !strings.HasPrefix(f.Note, "skipped") {
			n++
		}
	}
	return n
}

// Text is the human-readable report.
func (r *Report) Text() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("quorate chaos report")
	p("seed       %d", r.Seed)
	p("duration   %s (%s .. %s)", r.Duration, r.Start.UTC().Format(time.RFC3339), r.End.UTC().Format(time.RFC3339))
	p("nodes      %d at %s", r.Nodes, strings.Join(r.Addresses, ", "))
	p("partitions %s", r.Partitions)
	p("")
	p("faults (%d injected of %d scheduled):", r.injected(), len(r.Faults))
	for _, f := range r.Faults {
		extra := f.Note
		if f.Offset != 0 {
			extra = fmt.Sprintf("offset %s %s", f.Offset, extra)
		}
		p("  %s .. %s %6.1fs  %-17s %s %s", f.Start.UTC().Format("15:04:05.000"), f.End.UTC().Format("15:04:05.000"),
			f.End.Sub(f.Start).Seconds(), f.Kind, f.Target, extra)
	}
	p("")
	p("ops        strict %d (unknown %d), leased %d (failed %d)", r.StrictOps, r.StrictUnknown, r.LeasedOps, r.LeasedFailed)
	p("filler     %d strict checks, %d decided in the log, %d answered with another request's result", r.FillerOps, r.FillerDecided, r.FillerMisfit)
	p("batching   %d log entries seen, %d carried several requests, %d of them a checked key's with another", r.Entries, r.SharedEntries, r.CheckedShared)
	p("gaps       longest time without a decided check: strict %s (from %s), leased %s (from %s)",
		r.StrictGap.Round(time.Millisecond), r.StrictGapAt.UTC().Format("15:04:05.000"),
		r.LeasedGap.Round(time.Millisecond), r.LeasedGapAt.UTC().Format("15:04:05.000"))
	p("")
	p("strict keys:")
	for _, k := range r.Strict {
		p("  %-12s limit %d/%s burst %d: %d ops; linearizable %s, durable %s (%s); decided by shard %s", k.Key, k.Limit.Limit, k.Limit.Period,
			k.Limit.Capacity(), k.Ops, k.Linearizable, k.Durable, k.CheckTime, joinInts(k.Shards, " then "))
		p("    admission: %s", k.Admission)
	}
	p("leased keys:")
	for _, k := range r.Leased {
		p("  %-12s limit %d/%s burst %d: %d allowed, %d denied, %d unavailable, %d failed; limit allowed %d over the run, under-admitted %d (below min(limit, demand)); over-admitted %d (max excess %d)",
			k.Key, k.Limit.Limit, k.Limit.Period, k.Limit.Capacity(), k.Allowed, k.Denied, k.Unavailable, k.Failed,
			k.AllowedByLimit, k.UnderAdmitted, k.OverAdmitted, k.MaxExcess)
	}
	p("")
	p("durability %s", r.Durability)
	if r.OK() {
		p("verdict    PASS")
	} else {
		p("verdict    FAIL")
		for _, v := range r.Violations {
			p("  - %s", v)
		}
		p("replay     %s", r.Replay)
	}
	p("%s", r.Summary())
	return b.String()
}

// write saves report.json and report.txt in dir.
func (r *Report) write(dir string) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("chaos: report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), js, 0o644); err != nil {
		return fmt.Errorf("chaos: report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(r.Text()), 0o644); err != nil {
		return fmt.Errorf("chaos: report: %w", err)
	}
	return nil
}

func joinInts(xs []int, sep string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.Itoa(x)
	}
	return strings.Join(out, sep)
}
