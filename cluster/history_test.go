package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
)

// TestRollbackTooLarge: a rollback whose entry would not fit in a peer
// message is refused before anything is proposed, saying what to do.
func TestRollbackTooLarge(t *testing.T) {
	old := maxRollbackEntry
	maxRollbackEntry = 4 << 10
	t.Cleanup(func() { maxRollbackEntry = old })
	n := &Node{}
	for v, limit := range []string{"5/min", "50/min"} {
		ps := make([]policy.Policy, 100)
		for i := range ps {
			id := fmt.Sprintf("t%03d", i)
			ps[i] = policy.Policy{ID: id, Scope: policy.Scope{"tenant_id": {id}}, Key: []string{"tenant_id"},
				Algorithm: "FIXED_WINDOW", Config: &policy.Config{Limit: policy.Amount(limit)}}
		}
		b, _ := json.Marshal(meta.Command{Op: meta.OpApply, Now: int64(v + 1), Policies: ps})
		if res := n.metaFSM.Apply(b).(meta.Result); res.Err != "" {
			t.Fatal(res.Err)
		}
	}
	_, err := n.rollbackPolicies(context.Background(), &meta.Command{Op: meta.OpRollback, To: 1}, false)
	if err == nil || !strings.Contains(err.Error(), "rollback to 1 would put back 100 policies") || !strings.Contains(err.Error(), "roll back to a later version first") {
		t.Errorf("a rollback larger than an entry: %v", err)
	}
}
