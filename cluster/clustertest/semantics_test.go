package clustertest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// guidePolicy is the guide's example as users paste it (issue 14): no key.
const guidePolicy = `{ "policy_id": "policy_payments_post_tier2",
  "scope": { "tenant_tier": "PRO", "route": "/v1/payments", "method": "POST" },
  "algorithm": "TOKEN_BUCKET", "config": { "capacity": 200, "refill_per_sec": 50 },
  "mode": "HARD", "fail_behavior": "FAIL_CLOSED", "priority": 900, "enabled": true,
  "updated_at": "2026-02-22T22:10:00Z" }`

// TestGuideExample: the guide's example pasted verbatim is refused with a
// message naming the fix, and changes nothing; written with the guide's
// key, two tenants each get the full capacity of 200, where the same
// policy written shared: true gives them one bucket of 200 together.
func TestGuideExample(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminClient(t, c, 0, "operator")

	_, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: guidePolicy, SourceName: "guide.json"})
	for _, s := range []string{"guide.json:2:29: policy policy_payments_post_tier2: no key", "key: [tenant_id, api_key_id]", "shared: true"} {
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), s) {
			t.Fatalf("the guide's example verbatim: %v; want InvalidArgument with %q", err, s)
		}
	}
	if l, err := admin.ListPolicies(ctx, &pb.ListPoliciesRequest{}); err != nil || l.GetVersion() != 0 {
		t.Fatalf("after the refusal: %v, %v; want version 0", l, err)
	}

	keyed := strings.Replace(guidePolicy, `"algorithm"`, `"key": ["tenant_id", "api_key_id"], "algorithm"`, 1)
	shared := strings.NewReplacer(`"algorithm"`, `"shared": true, "algorithm"`, "tier2", "shared", `"PRO"`, `"SHARED"`).Replace(guidePolicy)
	applied, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: "[" + keyed + "," + shared + "]", SourceName: "guide.json"})
	if err != nil || len(applied.GetAdded()) != 2 || len(applied.GetWarnings()) != 0 {
		t.Fatalf("apply with the key and shared: %v, %v; want both added, no warnings", applied, err)
	}
	awaitVersion(t, c, applied.GetVersion(), 5*time.Second)

	pay := func(node int, tenant, tier string) httpAnswer {
		_, a := httpCheck(t, c, node, fmt.Sprintf(`{"subject":{"tenant_id":%q,"tenant_tier":%q,"api_key_id":"k_1"},"resource":{"route":"/v1/payments","method":"POST"},"cost":200}`, tenant, tier))
		return a
	}
	// Each request takes the whole capacity; refilling it takes 4s.
	for i, tenant := range []string{"t_a", "t_b"} {
		if a := pay(i, tenant, "PRO"); a.Decision != "ALLOW" || a.AppliedPolicyID != "policy_payments_post_tier2" || a.Remaining != 0 {
			t.Errorf("%s takes 200 of its own bucket: %+v; want ALLOW by policy_payments_post_tier2, 0 left", tenant, a)
		}
	}
	if a := pay(2, "t_a", "PRO"); a.Decision != "DENY" {
		t.Errorf("t_a again: %+v; want DENY: its bucket is empty", a)
	}
	if a := pay(0, "t_c", "SHARED"); a.Decision != "ALLOW" {
		t.Errorf("t_c on the shared policy: %+v; want ALLOW", a)
	}
	if a := pay(1, "t_d", "SHARED"); a.Decision != "DENY" || a.AppliedPolicyID != "policy_payments_post_shared" {
		t.Errorf("t_d on the shared policy: %+v; want DENY: t_c emptied the one bucket", a)
	}
}
