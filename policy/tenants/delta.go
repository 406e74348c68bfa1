package tenants

import "reflect"

// Delta is what takes a table from one version to a later one: the
// assignments set or moved, and the ids deleted. A gateway that holds the
// assignment is sent deltas, not the table again: a tenant moved in a
// table of a million is one assignment on the wire.
type Delta struct {
	Set     List     `json:"set,omitempty"`
	Deleted []string `json:"deleted,omitempty"`
}

// DeltaFrom is what changed from old to t, found by comparing only the
// maps t does not share with old (a change copies the ones it writes), so
// it costs what changed, not the table. ok is false when the two share no
// structure to compare (one is empty, or t was rebuilt in a larger shape)
// or the delta would hold more than max entries: send t whole then.
func (t *Table) DeltaFrom(old *Table, max int) (d Delta, ok bool) {
	if t == nil || old == nil || t.root == nil || old.root == nil || t.shape != old.shape {
		return Delta{}, false
	}
	for i := range t.root {
		a, b := t.root[i], old.root[i]
		if len(a) > 0 && len(b) > 0 && &a[0] == &b[0] {
			continue // a middle array a change did not copy: nothing below it changed
		}
		for j := 0; j < len(a) || j < len(b); j++ {
			var ma, mb map[string]string
			if j < len(a) {
				ma = a[j]
			}
			if j < len(b) {
				mb = b[j]
			}
			if reflect.ValueOf(ma).UnsafePointer() == reflect.ValueOf(mb).UnsafePointer() {
				continue
			}
			d.add(ma, mb)
			if len(d.Set)+len(d.Deleted) > max {
				return Delta{}, false
			}
		}
	}
	return d, true
}

// add notes how map now differs from was.
func (d *Delta) add(now, was map[string]string) {
	for id, p := range now {
		if q, ok := was[id]; !ok || q != p {
			d.Set = append(d.Set, Assignment{TenantID: id, Plan: p})
		}
	}
	for id := range was {
		if _, ok := now[id]; !ok {
			d.Deleted = append(d.Deleted, id)
		}
	}
}

// Patched is t with d applied, at version v: what a gateway makes of the
// table it holds and a delta from it. t does not change. The assignments
// are validated, as UnmarshalJSON validates a whole table's.
func (t *Table) Patched(d Delta, v uint64) (*Table, error) {
	for _, a := range d.Set {
		if err := Validate(a); err != nil {
			return nil, err
		}
	}
	for _, id := range d.Deleted {
		if err := ValidateID(id); err != nil {
			return nil, err
		}
	}
	next, _ := t.Set(d.Set)
	next, _ = next.Delete(d.Deleted)
	return next.WithVersion(v), nil
}
