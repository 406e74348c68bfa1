package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/policy/envoyconf"
	"github.com/quorate/quorate/telemetry"
)

// Envoy's rate limit service (envoy.service.ratelimit.v3), so that an
// Envoy pointed at quorate instead of the reference service works
// unchanged. Each descriptor of a request is the reference's walk over the
// imported configuration (policy/envoyconf), then one check of the node's
// policy by the engine, like any other check: replicated, exact, and a
// denied descriptor consumes nothing. docs/envoy.md says where quorate
// answers differently from the reference.

// Bounds of one ShouldRateLimit request, beyond the codec's message size.
const (
	rlsMaxDescriptors = 64
	rlsMaxEntries     = 64
)

// shouldRateLimitMethod is the full gRPC method name, for the token check.
const shouldRateLimitMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// rls serves RateLimitService from the node's policy set and engine.
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	node Node

	// index is the imported configuration of the policy set's version;
	// mu serialises rebuilding it when the version moves.
	index atomic.Pointer[rlsIndex]
	mu    sync.Mutex
}

type rlsIndex struct {
	version uint64
	x       *envoyconf.Index
}

// current is the index of the node's policy set, rebuilt once per version.
func (s *rls) current() *envoyconf.Index {
	st := s.node.PolicySet()
	if cur := s.index.Load(); cur != nil && cur.version == st.Version {
		return cur.x
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.index.Load(); cur != nil && cur.version == st.Version {
		return cur.x
	}
	x := envoyconf.NewIndex(st.Policies)
	s.index.Store(&rlsIndex{version: st.Version, x: x})
	return x
}

// rlsItem is one descriptor, validated and matched.
type rlsItem struct {
	entries []envoyconf.Entry
	hits    uint64
	m       envoyconf.Match
	// delay is a THROTTLE's wait: Envoy has no throttle, so the answer is
	// OK with the wait in a header for the upstream or a filter to honour.
	delay time.Duration
}

func (s *rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, span := telemetry.StartSpan(grpcTraceContext(ctx), "quorate.ShouldRateLimit")
	defer span.End()
	items, err := parseRLS(req)
	if err != nil {
		return nil, err
	}
	x := s.current()
	// The reference's replaces: a limit whose name another descriptor's
	// limit replaces (unlimited ones included) does not apply.
	replaced := map[string]bool{}
	for i := range items {
		items[i].m = x.Match(req.GetDomain(), items[i].entries)
		if sp := items[i].m.Spec; sp != nil {
			for _, r := range sp.Replaces {
				replaced[r] = true
			}
		}
	}
	now := s.node.Now()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items))}
	minAt, minRemaining := -1, uint32(math.MaxUint32)
	for i := range items {
		it := &items[i]
		sp := it.m.Spec
		var st *rlsv3.RateLimitResponse_DescriptorStatus
		switch {
		case sp == nil || sp.NoLimit || sp.Name != "" && replaced[sp.Name]:
			st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		case sp.Unlimited:
			st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		case sp.RequestsPerUnit == 0 && sp.Shadow:
			// Over a limit of 0, in shadow: reported, never denied.
			st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: currentLimit(sp), DurationUntilReset: unitReset(sp.Unit, now)}
		default:
			st, err = s.check(ctx, it, now)
			if err != nil {
				return nil, err
			}
		}
		resp.Statuses[i] = st
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		// The headers describe the tightest descriptor, chosen as the
		// reference chooses: the least remaining among those with a limit,
		// and the last over the limit if any is.
		switch {
		case st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			minAt, minRemaining = i, 0
		case st.GetCurrentLimit() != nil && st.GetLimitRemaining() < minRemaining:
			minAt, minRemaining = i, st.GetLimitRemaining()
		}
	}
	resp.ResponseHeadersToAdd = rlsHeaders(ctx, resp, items, minAt)
	return resp, nil
}

// check decides one matched descriptor with the engine: its node's policy,
// counted by its entries.
func (s *rls) check(ctx context.Context, it *rlsItem, now time.Time) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	sp := it.m.Spec
	dreq := &decide.Request{Source: "envoy", Descriptors: &decide.Descriptors{
		Custom: map[string]string{envoyconf.NodeDescriptor: it.m.PolicyID, envoyconf.KeyDescriptor: envoyconf.Key(it.entries)},
		Cost:   int64(it.hits),
	}}
	if it.hits == 0 {
		// hits_addend 0 asks without counting: a dry run of one.
		dreq.DryRun, dreq.Descriptors.Cost = true, 1
	}
	ans, err := s.node.Engine().Check(ctx, dreq)
	if err != nil {
		return nil, rpcError(err)
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: currentLimit(sp)}
	switch ans.Decision {
	case decide.Deny:
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	case decide.Throttle:
		it.delay = ans.Delay()
	}
	var reset time.Duration
	for _, p := range ans.Policies {
		if p.PolicyID == it.m.PolicyID {
			st.LimitRemaining = uint32(min(max(p.Remaining, 0), math.MaxUint32))
			reset = p.ResetAfter
		}
	}
	if reset > 0 {
		st.DurationUntilReset = &durationpb.Duration{Seconds: int64((reset + time.Second - 1) / time.Second)}
	} else {
		st.DurationUntilReset = unitReset(sp.Unit, now)
	}
	return st, nil
}

func currentLimit(sp *envoyconf.Spec) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{
		Name:            sp.Name,
		RequestsPerUnit: sp.RequestsPerUnit,
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[string(sp.Unit)]),
	}
}

// unitReset is the time to the end of the unit's window, windows aligned
// to the Unix epoch (the reference's reset).
func unitReset(u envoyconf.Unit, now time.Time) *durationpb.Duration {
	sec := u.Seconds()
	if sec <= 0 {
		return nil
	}
	return &durationpb.Duration{Seconds: sec - now.Unix()%sec}
}

// parseRLS validates a request whole, before anything is counted: the
// error names the field.
func parseRLS(req *rlsv3.RateLimitRequest) ([]rlsItem, error) {
	if req.GetDomain() == "" {
		return nil, badRequest("domain", "must not be empty")
	}
	if err := envoyconf.CheckText(req.GetDomain()); err != nil {
		return nil, badRequest("domain", "%v", err)
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, badRequest("descriptors", "must not be empty")
	}
	if len(ds) > rlsMaxDescriptors {
		return nil, badRequest("descriptors", "%d descriptors, at most %d", len(ds), rlsMaxDescriptors)
	}
	hits := uint64(max(1, req.GetHitsAddend()))
	if hits > decide.DefaultMaxRequestCost {
		return nil, badRequest("hits_addend", "%d, at most %d", hits, decide.DefaultMaxRequestCost)
	}
	items := make([]rlsItem, len(ds))
	for i, d := range ds {
		f := fmt.Sprintf("descriptors[%d]", i)
		es := d.GetEntries()
		if len(es) == 0 {
			return nil, badRequest(f+".entries", "must not be empty")
		}
		if len(es) > rlsMaxEntries {
			return nil, badRequest(f+".entries", "%d entries, at most %d", len(es), rlsMaxEntries)
		}
		if d.GetLimit() != nil {
			return nil, badRequest(f+".limit", "limit overrides are not supported: import the limit with quorate policy import --envoy")
		}
		if d.GetIsNegativeHits() {
			return nil, badRequest(f+".is_negative_hits", "negative hits are not supported")
		}
		items[i].hits = hits
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > decide.DefaultMaxRequestCost {
				return nil, badRequest(f+".hits_addend", "%d, at most %d", h.GetValue(), decide.DefaultMaxRequestCost)
			}
			items[i].hits = h.GetValue()
		}
		items[i].entries = make([]envoyconf.Entry, len(es))
		for j, e := range es {
			ef := fmt.Sprintf("%s.entries[%d]", f, j)
			if e.GetKey() == "" {
				return nil, badRequest(ef+".key", "must not be empty")
			}
			if err := envoyconf.CheckText(e.GetKey()); err != nil {
				return nil, badRequest(ef+".key", "%v", err)
			}
			if err := envoyconf.CheckText(e.GetValue()); err != nil {
				return nil, badRequest(ef+".value", "%v", err)
			}
			items[i].entries[j] = envoyconf.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	return items, nil
}

// rlsHeaders are the headers Envoy adds to the client's response: the IETF
// RateLimit fields of the tightest descriptor (as the reference does with
// its response headers enabled) and the trace headers.
func rlsHeaders(ctx context.Context, resp *rlsv3.RateLimitResponse, items []rlsItem, minAt int) []*corev3.HeaderValue {
	decision, policyID := "ALLOW", ""
	var delay time.Duration
	for i := range items {
		delay = max(delay, items[i].delay)
	}
	switch {
	case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		decision = "DENY"
	case delay > 0:
		decision = "THROTTLE"
	}
	var hs []*corev3.HeaderValue
	if minAt >= 0 {
		st := resp.Statuses[minAt]
		policyID = items[minAt].m.PolicyID
		hs = append(hs,
			&corev3.HeaderValue{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)},
			&corev3.HeaderValue{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)},
			&corev3.HeaderValue{Key: "RateLimit-Reset", Value: strconv.FormatInt(st.GetDurationUntilReset().GetSeconds(), 10)},
		)
	}
	hs = append(hs, &corev3.HeaderValue{Key: "x-request-id", Value: incomingRequestID(ctx)},
		&corev3.HeaderValue{Key: "x-rate-limit-decision", Value: decision})
	if policyID != "" {
		hs = append(hs, &corev3.HeaderValue{Key: "x-policy-id", Value: policyID})
	}
	if decision == "THROTTLE" {
		ms := int64((delay-1)/time.Millisecond) + 1
		hs = append(hs, &corev3.HeaderValue{Key: "x-ratelimit-delay-ms", Value: strconv.FormatInt(ms, 10)})
	}
	return hs
}

// incomingRequestID is the caller's x-request-id, or a new one.
func incomingRequestID(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("x-request-id"); len(v) > 0 && v[0] != "" && envoyconf.CheckText(v[0]) == nil {
			return v[0]
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// registerRLS adds the service to s.
func registerRLS(s *grpc.Server, r *rls) { rlsv3.RegisterRateLimitServiceServer(s, r) }
