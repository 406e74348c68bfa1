package meta

import (
	"fmt"
	"testing"

	"github.com/quorate/quorate/policy/tenants"
)

// BenchmarkTenantSnapshot is a meta snapshot, and its restore, holding a
// million assignments (ids of 9 bytes, two plans): what a node pays to
// snapshot after an import and to come back from a restart.
func BenchmarkTenantSnapshot(b *testing.B) {
	as := make([]tenants.Assignment, 1_000_000)
	for i := range as {
		as[i] = tenants.Assignment{TenantID: fmt.Sprintf("t_%07d", i), Plan: []string{"FREE", "PRO"}[i%2]}
	}
	t, _ := (*tenants.Table)(nil).Set(as)
	f := &FSM{}
	f.setTenants(t, 0)
	var snap []byte
	b.Run("snapshot", func(b *testing.B) {
		for b.Loop() {
			var err error
			if snap, err = f.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(snap)), "bytes")
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			var g FSM
			if err := g.Restore(snap); err != nil || g.Tenants().Len() != len(as) {
				b.Fatal(err)
			}
		}
	})
}
