package api

import (
	"fmt"
	"strings"
	"testing"
)

// An audit line names at most auditIDsShown ids of a kind and counts the
// rest.
func TestAuditIDs(t *testing.T) {
	var ids []string
	for i := range 25_000 {
		ids = append(ids, fmt.Sprintf("t_%d_override", i))
	}
	got := fmt.Sprint(auditIDs(ids))
	if len(got) > 500 || !strings.HasSuffix(got, "and 24980 more") || !strings.HasPrefix(got, "[t_0_override") {
		t.Fatalf("audit of 25,000 ids: %d bytes: %.200s", len(got), got)
	}
	if got := fmt.Sprint(auditIDs(ids[:3])); got != "[t_0_override t_1_override t_2_override]" {
		t.Fatalf("audit of 3 ids: %s", got)
	}
}
