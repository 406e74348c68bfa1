package tenants

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// tableJSON is a table's snapshot form: the ids on each plan.
type tableJSON struct {
	Version uint64              `json:"version"`
	Plans   map[string][]string `json:"plans"`
}

// MarshalJSON writes {"version": v, "plans": {"PRO": ["t_1", ...], ...}}:
// each plan's name once, so an id costs its own bytes and four more.
func (t *Table) MarshalJSON() ([]byte, error) {
	out := tableJSON{Version: t.Version(), Plans: make(map[string][]string, t.numPlans())}
	if t != nil {
		for p, c := range t.plans {
			out.Plans[p] = make([]string, 0, c.n)
		}
	}
	t.Range(func(id, plan string) bool {
		out.Plans[plan] = append(out.Plans[plan], id)
		return true
	})
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote, validating every
// assignment; an id listed under two plans is refused (a snapshot never
// holds one, and which would win is not defined).
func (t *Table) UnmarshalJSON(b []byte) error {
	var in tableJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	n := 0
	for _, ids := range in.Plans {
		n += len(ids)
	}
	as := make([]Assignment, 0, n)
	for _, p := range slices.Sorted(maps.Keys(in.Plans)) {
		for _, id := range in.Plans[p] {
			a := Assignment{TenantID: id, Plan: p}
			if err := Validate(a); err != nil {
				return err
			}
			as = append(as, a)
		}
	}
	next, _ := (*Table)(nil).Set(as)
	if next.Len() != n {
		return fmt.Errorf("tenants: %d assignments for %d tenants: an id is listed under two plans", n, next.Len())
	}
	*t = *next.WithVersion(in.Version)
	return nil
}

// List is assignments as a meta command carries them: [["t_1","PRO"], ...],
// eight bytes of JSON beside the values where objects would take thirty.
type List []Assignment

// MarshalJSON writes pairs.
func (l List) MarshalJSON() ([]byte, error) {
	pairs := make([][2]string, len(l))
	for i, a := range l {
		pairs[i] = [2]string{a.TenantID, a.Plan}
	}
	return json.Marshal(pairs)
}

// UnmarshalJSON reads pairs.
func (l *List) UnmarshalJSON(b []byte) error {
	var pairs [][2]string
	if err := json.Unmarshal(b, &pairs); err != nil {
		return err
	}
	out := make(List, len(pairs))
	for i, p := range pairs {
		out[i] = Assignment{TenantID: p[0], Plan: p[1]}
	}
	*l = out
	return nil
}

// EncodedSize is what a takes in a List's JSON.
func EncodedSize(a Assignment) int { return jsonLen(a.TenantID) + jsonLen(a.Plan) + 8 }

// jsonLen is the length of s as encoding/json quotes it, less the quotes:
// it escapes ", \, <, >, & and U+2028/U+2029 (control characters never
// pass Validate).
func jsonLen(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r < 0x20:
			n += 6
		case r == utf8.RuneError:
			n += 6 // \ufffd for a byte that is not UTF-8
		default:
			n += utf8.RuneLen(r)
		}
	}
	return n
}
