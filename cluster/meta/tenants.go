package meta

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/quorate/quorate/policy/tenants"
)

// The tenant assignment: which plan each tenant is on, replicated beside
// the policy set with a version of its own. A change is a command of at
// most MaxTenantChange assignments, so that a million tenants arrive as a
// few hundred entries, none near a message bound, and each replica applies
// one in time that grows with it, not with the table.

// Meta ops that change the tenant assignment.
const (
	OpTenantSet    = "tenant-set"    // Tenants
	OpTenantDelete = "tenant-delete" // IDs
)

// Bounds of the tenant assignment. Every node holds the table in memory
// (about 80 bytes an assignment of short ids) and in its meta snapshots.
// A command is bounded so that raft's largest AppendEntries (256 entries)
// stays inside the peer port's 64 MiB message bound.
const (
	MaxTenants           = 10_000_000
	MaxPlans             = 4096
	MaxTenantChange      = 5000
	MaxTenantChangeBytes = 192 << 10 // of tenants.EncodedSize
)

// The bounds NextTenants applies (tests lower them).
var maxTenants, maxPlans = MaxTenants, MaxPlans

// TenantResult is what a tenant command did (Result.Tenants).
type TenantResult struct {
	// Version of the assignment after the command (unchanged if it
	// changed nothing), and the tenants it holds.
	Version uint64 `json:"version"`
	Tenants int    `json:"tenants"`
	// The command's counts: tenants.Changes.
	Set       int `json:"set,omitempty"`
	Unchanged int `json:"unchanged,omitempty"`
	Deleted   int `json:"deleted,omitempty"`
	Missing   int `json:"missing,omitempty"`
}

func isTenantOp(op string) bool { return op == OpTenantSet || op == OpTenantDelete }

// tenantStore holds the assignment: written by Apply and Restore (raft's
// one goroutine), read by anyone through the atomic pointer; mu guards the
// waiters' channel only.
type tenantStore struct {
	table atomic.Pointer[tenants.Table]
	mu    sync.Mutex
	// changed is closed, and replaced by the next waiter, when the table
	// changes (WaitTenants); nil while no one waits.
	changed chan struct{}
}

// CheckTenantChange is what a proposer checks before it proposes c, and
// the state machine again: the size of the change and each assignment. The
// error is a *tenants.FieldError naming the field as the Admin API does
// (assignments[3].plan, tenant_ids).
func CheckTenantChange(c *Command) error {
	field, n := "assignments", len(c.Tenants)
	if c.Op == OpTenantDelete {
		field, n = "tenant_ids", len(c.IDs)
	}
	switch {
	case n == 0:
		return &tenants.FieldError{Field: field, Msg: "empty: name at least one tenant"}
	case n > MaxTenantChange:
		return &tenants.FieldError{Field: field, Msg: fmt.Sprintf("%d tenants, at most %d a change (send chunks)", n, MaxTenantChange)}
	}
	size := 0
	for i, a := range c.Tenants {
		if err := tenants.Validate(a); err != nil {
			fe := err.(*tenants.FieldError)
			return &tenants.FieldError{Field: fmt.Sprintf("assignments[%d].%s", i, fe.Field), Msg: fe.Msg}
		}
		size += tenants.EncodedSize(a)
	}
	for i, id := range c.IDs {
		if err := tenants.ValidateID(id); err != nil {
			fe := err.(*tenants.FieldError)
			return &tenants.FieldError{Field: fmt.Sprintf("tenant_ids[%d]", i), Msg: fe.Msg}
		}
		size += tenants.EncodedSize(tenants.Assignment{TenantID: id})
	}
	if size > MaxTenantChangeBytes {
		return &tenants.FieldError{Field: field, Msg: fmt.Sprintf("%d bytes of tenants, at most %d a change (send smaller chunks)", size, MaxTenantChangeBytes)}
	}
	return nil
}

// NextTenants is what command c makes of the table cur: the next table
// and what changed, or why c is refused. It changes nothing.
func NextTenants(cur *tenants.Table, c *Command) (*tenants.Table, tenants.Changes, error) {
	if err := CheckTenantChange(c); err != nil {
		return nil, tenants.Changes{}, err
	}
	if c.Op == OpTenantDelete {
		next, ch := cur.Delete(c.IDs)
		return next, ch, nil
	}
	next, ch := cur.Set(c.Tenants)
	switch {
	case next.Len() > maxTenants:
		return nil, ch, fmt.Errorf("the assignment would hold %d tenants, more than the cluster's maximum of %d", next.Len(), maxTenants)
	case next.NumPlans() > maxPlans:
		return nil, ch, fmt.Errorf("the assignment would name %d plans, more than the cluster's maximum of %d", next.NumPlans(), maxPlans)
	}
	return next, ch, nil
}

// applyTenants applies a tenant command; a refused one changes nothing, on
// every replica alike.
func (f *FSM) applyTenants(c *Command) Result {
	cur := f.ten.table.Load()
	next, ch, err := NextTenants(cur, c)
	if err != nil {
		return Result{Err: err.Error(), Code: CodeInvalid}
	}
	if ch.Changed() {
		f.setTenants(next, c.Now)
	}
	return Result{Tenants: &TenantResult{Version: next.Version(), Tenants: next.Len(),
		Set: ch.Set, Unchanged: ch.Unchanged, Deleted: ch.Deleted, Missing: ch.Missing}}
}

// setTenants makes t current, hands it to OnTenants and wakes the waiters.
func (f *FSM) setTenants(t *tenants.Table, stamped int64) {
	f.ten.table.Store(t)
	if f.OnTenants != nil {
		f.OnTenants(t, stamped)
	}
	f.ten.mu.Lock()
	if f.ten.changed != nil {
		close(f.ten.changed)
		f.ten.changed = nil
	}
	f.ten.mu.Unlock()
}

// Tenants returns the tenant assignment (nil: none yet). It never
// changes: a change replaces it.
func (f *FSM) Tenants() *tenants.Table { return f.ten.table.Load() }

// WaitTenants waits until this replica's assignment is at version v or
// later, and reports whether it is; false means ctx ended first.
func (f *FSM) WaitTenants(ctx context.Context, v uint64) bool {
	for {
		f.ten.mu.Lock()
		if f.ten.table.Load().Version() >= v {
			f.ten.mu.Unlock()
			return true
		}
		if f.ten.changed == nil {
			f.ten.changed = make(chan struct{})
		}
		changed := f.ten.changed
		f.ten.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// tenantSnapshot is the assignment as a snapshot carries it: nil (the
// field left out, as in snapshots from before tenants) until a tenant
// command first changed it.
func (f *FSM) tenantSnapshot() *tenants.Table {
	t := f.ten.table.Load()
	if t.Version() == 0 {
		return nil
	}
	return t
}

// restoreTenants installs a snapshot's assignment (nil: none).
func (f *FSM) restoreTenants(t *tenants.Table) {
	if t.Version() == 0 {
		t = nil
	}
	f.setTenants(t, 0)
}
