package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
)

// Every bound a request is checked against, in one place: a request is
// validated whole before anything is consumed, so a bad one changes
// nothing. A bucket's key is ring.BucketKey(name, key), name + NUL + key,
// which must fit in fsm.MaxKeyLen.
const (
	MaxNameLen      = 128
	MaxKeyLen       = fsm.MaxKeyLen - MaxNameLen - 1
	MaxRequestIDLen = 256

	maxDescriptorLen     = 256
	maxCustomDescriptors = 32
)

// Limits bound what one request can make a node do. Zero values take the
// defaults.
type Limits struct {
	// MaxRequestItems bounds the items of one check, and the buckets the
	// policies matching one descriptor check make (default 1000).
	MaxRequestItems int
	// MaxRequestCost bounds the sum of the costs of one check's items
	// (default 1,000,000).
	MaxRequestCost int64
}

// Default limits.
const (
	DefaultMaxRequestItems = 1000
	DefaultMaxRequestCost  = 1_000_000
)

func (l *Limits) setDefaults() {
	if l.MaxRequestItems <= 0 {
		l.MaxRequestItems = DefaultMaxRequestItems
	}
	if l.MaxRequestCost <= 0 {
		l.MaxRequestCost = DefaultMaxRequestCost
	}
}

// item is one validated bucket to decide.
type item struct {
	op   fsm.Op // the Take, keyed by bucket
	fail FailMode
	// soft: a SOFT or SHADOW policy's bucket, which never denies the request.
	soft bool
	// emergencyCap, with fail open, bounds what this node admits for the
	// bucket while its shard cannot decide (policy emergency_cap).
	emergencyCap *fsm.Limit
	// replayed: the shard answered from the idempotency record of an
	// earlier request, so this one took nothing and must refund nothing.
	replayed bool
	// leased: decided from the lease table (the request or its policy asked
	// for it, and the bucket can be leased); otherwise at the shard.
	leased bool
	// version is the policy set's version the item was resolved under (0
	// for an inline item): a remembered denial holds under its own only.
	version uint64
	// delay turns a throttled bucket's shaper answer into the request's
	// wait (policy.Delay); zero for other buckets.
	delay policy.Delay
}

func (it *item) closed() bool { return it.fail == FailClosedMode }

// validateRequest checks what both kinds of check share.
func validateRequest(req *Request) error {
	if len(req.ID) > MaxRequestIDLen {
		return badRequest("request_id", "longer than %d bytes", MaxRequestIDLen)
	}
	if req.Mode < ModeDefault || req.Mode > Leased {
		return badRequest("mode", "unknown mode %d", req.Mode)
	}
	if req.Descriptors != nil && len(req.Items) > 0 {
		return badRequest("items", "set either items or descriptors, not both")
	}
	return nil
}

// parseItems validates a check's inline items.
func parseItems(req *Request, lim *Limits) ([]item, error) {
	n := len(req.Items)
	if n == 0 {
		return nil, badRequest("items", "at least one item is required")
	}
	if n > lim.MaxRequestItems {
		return nil, badRequest("items", "%d items exceed the maximum of %d per request", n, lim.MaxRequestItems)
	}
	items := make([]item, n)
	var cost int64
	for i := range req.Items {
		var err error
		if items[i], err = parseItem(&req.Items[i]); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Field = fmt.Sprintf("items[%d].%s", i, fe.Field)
			}
			return nil, err
		}
		if c := items[i].op.Cost; c > lim.MaxRequestCost-cost {
			return nil, badRequest("items", "total cost exceeds the maximum of %d per request (at items[%d])", lim.MaxRequestCost, i)
		}
		cost += items[i].op.Cost
	}
	if req.Mode == Leased && !req.DryRun {
		for i := range items {
			items[i].leased = true
		}
		return items, leasable(items)
	}
	return items, nil
}

func parseItem(it *Item) (item, error) {
	switch {
	case it.Name == "":
		return item{}, badRequest("name", "must not be empty")
	case len(it.Name) > MaxNameLen:
		return item{}, badRequest("name", "longer than %d bytes", MaxNameLen)
	case strings.IndexByte(it.Name, 0) >= 0:
		return item{}, badRequest("name", "must not contain NUL")
	case it.Key == "":
		return item{}, badRequest("key", "must not be empty")
	case len(it.Key) > MaxKeyLen:
		return item{}, badRequest("key", "%d bytes exceed the maximum of %d", len(it.Key), MaxKeyLen)
	case len(it.IdempotencyKey) > fsm.MaxKeyLen:
		return item{}, badRequest("idempotency_key", "longer than %d bytes", fsm.MaxKeyLen)
	case it.Algorithm == fsm.AlgorithmUnspecified:
		return item{}, badRequest("algorithm", "required: one of %s", algorithmNames)
	case it.Fail < FailDefault || it.Fail > FailClosedMode:
		return item{}, badRequest("fail", "unknown fail mode %d", it.Fail)
	case it.Limit <= 0:
		return item{}, badRequest("limit", "must be positive, got %d", it.Limit)
	case !it.HasPeriod:
		return item{}, badRequest("period", "required")
	case it.BadPeriod != "":
		return item{}, badRequest("period", "%s", it.BadPeriod)
	}
	l := fsm.Limit{Algorithm: it.Algorithm, Limit: it.Limit, Period: it.Period, Burst: it.Burst}
	if err := l.Validate(); err != nil {
		return item{}, badRequest(limitField(err), "%s", strings.TrimPrefix(err.Error(), "fsm: "))
	}
	cost := it.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 0 || cost > l.Capacity() {
		return item{}, badRequest("cost", "%d is outside [1, %d], the bucket's capacity", cost, l.Capacity())
	}
	return item{
		op:   fsm.Op{Kind: fsm.OpTake, Key: ring.BucketKey(it.Name, it.Key), Limit: l, Cost: cost, IdempotencyKey: it.IdempotencyKey},
		fail: it.Fail,
	}, nil
}

// algorithmNames lists the algorithms, for a request that names none.
var algorithmNames = func() string {
	var names []string
	for a := fsm.AlgorithmUnspecified + 1; ; a++ {
		if _, err := fsm.ParseAlgorithm(a.String()); err != nil {
			break // past the last one: "algorithm(8)"
		}
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}()

// limitField names the request field a limit validation error is about.
func limitField(err error) string {
	switch {
	case errors.Is(err, fsm.ErrBurst):
		return "burst"
	case errors.Is(err, fsm.ErrPeriod):
		return "period"
	case errors.Is(err, fsm.ErrUnknownAlgorithm):
		return "algorithm"
	}
	return "limit"
}

// leasableOp: a bucket a lease can serve. An order-dependent algorithm
// needs every decision at the shard, and an idempotency key can only be
// deduplicated there, so such a policy's bucket is decided strictly even
// when the policy asks for LEASED. Apply refuses a new LEASED policy in
// dedupe mode and warns of a LEASED unleasable algorithm
// (policy.Snapshot.Review); this keeps a set stored before exact.
func leasableOp(op *fsm.Op) bool {
	return op.Limit.Algorithm.Leasable() && op.IdempotencyKey == ""
}

// leasable refuses an item that leased mode cannot serve.
func leasable(items []item) error {
	for i, it := range items {
		if !it.op.Limit.Algorithm.Leasable() {
			return badRequest(fmt.Sprintf("items[%d].algorithm", i), "%s cannot be leased (a %s needs every decision in order); use mode STRICT", it.op.Limit.Algorithm, it.op.Limit.Algorithm)
		}
		if it.op.IdempotencyKey != "" {
			return badRequest(fmt.Sprintf("items[%d].idempotency_key", i), "not supported in mode LEASED (a local decision cannot be deduplicated across nodes); use mode STRICT")
		}
	}
	return nil
}

// parseDescriptors validates the descriptors, naming the field at fault.
func parseDescriptors(d *Descriptors, lim *Limits) (policy.Request, error) {
	r := policy.Request{
		TenantID: d.TenantID, APIKeyID: d.APIKeyID, UserID: d.UserID, IP: d.IP,
		Route: d.Route, Method: d.Method, Service: d.Service, Region: d.Region,
		TenantTier: d.TenantTier, IdempotencyKey: d.IdempotencyKey, Cost: d.Cost,
	}
	fields := []struct{ name, v string }{
		{"tenant_id", r.TenantID}, {"api_key_id", r.APIKeyID}, {"user_id", r.UserID}, {"ip", r.IP},
		{"route", r.Route}, {"method", r.Method}, {"service", r.Service}, {"region", r.Region},
		{"tenant_tier", r.TenantTier}, {"idempotency_key", r.IdempotencyKey},
	}
	for _, f := range fields {
		if err := descriptorValue(f.v); err != "" {
			return r, badRequest("descriptors."+f.name, "%s", err)
		}
	}
	if r.IP != "" {
		if _, err := netip.ParseAddr(r.IP); err != nil {
			return r, badRequest("descriptors.ip", "%q is not an IPv4 or IPv6 address", r.IP)
		}
	}
	if d.RiskScore != nil {
		rs := *d.RiskScore
		if !(rs >= 0 && rs <= 1) { // also NaN
			return r, badRequest("descriptors.risk_score", "%v is outside [0, 1]", rs)
		}
		r.RiskScore, r.HasRisk = rs, true
	}
	if r.Cost < 0 || r.Cost > lim.MaxRequestCost {
		return r, badRequest("descriptors.cost", "%d is outside [0, %d]", r.Cost, lim.MaxRequestCost)
	}
	if len(d.Custom) > maxCustomDescriptors {
		return r, badRequest("descriptors.custom", "%d custom descriptors exceed the maximum of %d", len(d.Custom), maxCustomDescriptors)
	}
	if len(d.Custom) > 0 {
		r.Custom = make(map[string]string, len(d.Custom))
		for k, v := range d.Custom {
			if err := descriptorValue(k); err != "" || k == "" {
				return r, badRequest("descriptors.custom", "name %q: %s", k, orEmpty(err))
			}
			if err := descriptorValue(v); err != "" {
				return r, badRequest("descriptors.custom."+k, "%s", err)
			}
			r.Custom[k] = v
		}
	}
	if err := r.Validate(); err != nil {
		return r, badRequest("descriptors", "%v", err)
	}
	return r, nil
}

func orEmpty(err string) string {
	if err == "" {
		return "must not be empty"
	}
	return err
}

// descriptorValue says what is wrong with a descriptor value, or "".
func descriptorValue(v string) string {
	switch {
	case len(v) > maxDescriptorLen:
		return "longer than 256 bytes"
	case !utf8.ValidString(v):
		return "not valid UTF-8"
	case strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return "contains a control character"
	}
	return ""
}

// policyItems turns the applied policies into items to decide.
func policyItems(applied []policy.Evaluation, mode Mode, lim *Limits) ([]item, []evaluated, error) {
	var items []item
	evs := make([]evaluated, len(applied))
	for i, ev := range applied {
		evs[i] = evaluated{ev: ev, first: len(items)}
		for _, pi := range ev.Items {
			it := item{
				op:    fsm.Op{Kind: fsm.OpTake, Key: policyBucketKey(pi.Name, pi.Key), Limit: pi.Limit, Cost: max(1, pi.Cost), IdempotencyKey: pi.IdempotencyKey},
				fail:  FailOpenMode,
				soft:  ev.Mode == policy.Soft || ev.Mode == policy.Shadow,
				delay: pi.Delay,
			}
			if ev.Fail == policy.FailClosed {
				it.fail = FailClosedMode
			} else {
				it.emergencyCap = ev.EmergencyCap
			}
			if len(it.op.IdempotencyKey) > fsm.MaxKeyLen {
				it.op.IdempotencyKey = hashedKey(it.op.IdempotencyKey)
			}
			it.leased = mode != Strict && ev.Consistency == policy.Leased && leasableOp(&it.op)
			items = append(items, it)
		}
	}
	if len(items) > lim.MaxRequestItems {
		return nil, nil, badRequest("descriptors", "the matching policies make %d buckets, more than the maximum of %d per request", len(items), lim.MaxRequestItems)
	}
	return items, evs, nil
}

// policyBucketKey keys a policy's bucket; a key too long for the state
// machine is replaced by its SHA-256, which keeps buckets apart as surely.
func policyBucketKey(name, key string) string {
	k := ring.BucketKey(name, key)
	if len(k) <= fsm.MaxKeyLen {
		return k
	}
	return ring.BucketKey(name, hashedKey(key))
}

func hashedKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// Validate checks a request as Check does, without deciding it: the error
// is the one Check would refuse it with (a *FieldError), or nil.
func Validate(req *Request, lim Limits) error {
	lim.setDefaults()
	if err := validateRequest(req); err != nil {
		return err
	}
	if req.Descriptors != nil {
		_, err := parseDescriptors(req.Descriptors, &lim)
		return err
	}
	_, err := parseItems(req, &lim)
	return err
}
