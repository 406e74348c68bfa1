package decide

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// TestValidation: every bad request is refused whole, naming the field at
// fault, before anything reaches a shard.
func TestValidation(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, func(cfg *Config) {
		cfg.Limits = Limits{MaxRequestItems: 3, MaxRequestCost: 15}
		cfg.Policies = compile(t, "policies: []")
	})
	ok := tbItem("api", "k", 10)
	with := func(mod func(*Item)) []Item {
		it := ok
		mod(&it)
		return []Item{it}
	}
	nan := math.NaN()
	for _, tt := range []struct {
		name  string
		req   Request
		field string
	}{
		{"no items", Request{}, "items"},
		{"too many items", Request{Items: []Item{ok, ok, ok, ok}}, "items"},
		{"empty name", Request{Items: with(func(i *Item) { i.Name = "" })}, "items[0].name"},
		{"NUL in name", Request{Items: with(func(i *Item) { i.Name = "a\x00b" })}, "items[0].name"},
		{"long name", Request{Items: with(func(i *Item) { i.Name = strings.Repeat("n", MaxNameLen+1) })}, "items[0].name"},
		{"empty key", Request{Items: with(func(i *Item) { i.Key = "" })}, "items[0].key"},
		{"long key", Request{Items: with(func(i *Item) { i.Key = strings.Repeat("k", MaxKeyLen+1) })}, "items[0].key"},
		{"long idempotency key", Request{Items: with(func(i *Item) { i.IdempotencyKey = strings.Repeat("i", fsm.MaxKeyLen+1) })}, "items[0].idempotency_key"},
		{"no algorithm", Request{Items: with(func(i *Item) { i.Algorithm = fsm.AlgorithmUnspecified })}, "items[0].algorithm"},
		{"no algorithm and no limit", Request{Items: with(func(i *Item) { i.Algorithm, i.Limit = fsm.AlgorithmUnspecified, 0 })}, "items[0].algorithm"},
		{"malformed period", Request{Items: with(func(i *Item) { i.BadPeriod = "seconds out of range" })}, "items[0].period"},
		{"malformed period and negative burst", Request{Items: with(func(i *Item) { i.BadPeriod, i.Burst = "seconds out of range", -1 })}, "items[0].period"},
		{"unknown fail mode", Request{Items: with(func(i *Item) { i.Fail = 7 })}, "items[0].fail"},
		{"zero limit", Request{Items: with(func(i *Item) { i.Limit = 0 })}, "items[0].limit"},
		{"no period", Request{Items: with(func(i *Item) { i.HasPeriod = false })}, "items[0].period"},
		{"zero period", Request{Items: with(func(i *Item) { i.Period = 0 })}, "items[0].period"},
		{"negative burst", Request{Items: with(func(i *Item) { i.Burst = -1 })}, "items[0].burst"},
		{"cost over capacity", Request{Items: with(func(i *Item) { i.Cost = 11 })}, "items[0].cost"},
		{"negative cost", Request{Items: with(func(i *Item) { i.Cost = -1 })}, "items[0].cost"},
		{"total cost", Request{Items: []Item{{Name: "a", Key: "k", Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Hour, HasPeriod: true, Cost: 10}, ok, {Name: "b", Key: "k", Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Hour, HasPeriod: true, Cost: 5}}}, "items"},
		{"leased sliding log", Request{Mode: Leased, Items: with(func(i *Item) { i.Algorithm = fsm.SlidingLog })}, "items[0].algorithm"},
		{"leased idempotency", Request{Mode: Leased, Items: with(func(i *Item) { i.IdempotencyKey = "x" })}, "items[0].idempotency_key"},
		{"long request id", Request{ID: strings.Repeat("r", MaxRequestIDLen+1), Items: []Item{ok}}, "request_id"},
		{"unknown mode", Request{Mode: 9, Items: []Item{ok}}, "mode"},
		{"items and descriptors", Request{Items: []Item{ok}, Descriptors: &Descriptors{TenantID: "t"}}, "items"},
		{"bad ip", Request{Descriptors: &Descriptors{IP: "10.0.0"}}, "descriptors.ip"},
		{"NaN risk", Request{Descriptors: &Descriptors{RiskScore: &nan}}, "descriptors.risk_score"},
		{"control character", Request{Descriptors: &Descriptors{TenantID: "t\n1"}}, "descriptors.tenant_id"},
		{"long route", Request{Descriptors: &Descriptors{Route: "/" + strings.Repeat("r", 256)}}, "descriptors.route"},
		{"invalid UTF-8", Request{Descriptors: &Descriptors{UserID: "\xff"}}, "descriptors.user_id"},
		{"empty custom name", Request{Descriptors: &Descriptors{Custom: map[string]string{"": "v"}}}, "descriptors.custom"},
		{"bad custom value", Request{Descriptors: &Descriptors{Custom: map[string]string{"plan": "a\x7f"}}}, "descriptors.custom.plan"},
		{"negative descriptor cost", Request{Descriptors: &Descriptors{Cost: -1}}, "descriptors.cost"},
		{"descriptor cost over the request bound", Request{Descriptors: &Descriptors{Cost: 16}}, "descriptors.cost"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Check(context.Background(), &tt.req)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("%v, want a FieldError on %s", err, tt.field)
			}
		})
	}
	if n := len(f.calls); n != 0 {
		t.Errorf("%d submits for refused requests, want none", n)
	}
}

// TestPoliciesBehind: descriptor checks wait for the policy set to catch
// up; checks that name their limits do not need it.
func TestPoliciesBehind(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, nil)
	if _, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "t"}}); !errors.Is(err, ErrPoliciesBehind) {
		t.Errorf("%v, want ErrPoliciesBehind", err)
	}
	if ans, err := e.Check(context.Background(), &Request{Items: []Item{tbItem("api", "k", 10)}}); err != nil || ans.Decision != Allow {
		t.Errorf("%+v %v, want allowed", ans, err)
	}
}
