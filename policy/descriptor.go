package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/quorate/quorate/policy/extract"
)

// desc numbers the standard descriptors; custom ones are matched by name.
type desc uint8

const (
	dTenantID desc = iota
	dAPIKeyID
	dUserID
	dIP
	dRoute
	dMethod
	dService
	dRegion
	dTenantTier
	numDescs
	dCustom desc = 255
)

var descNames = [numDescs]string{"tenant_id", "api_key_id", "user_id", "ip", "route", "method", "service", "region", "tenant_tier"}

const knownDescs = "tenant_id, api_key_id, user_id, ip, route, method, service, region, tenant_tier"

// Bounds on requests and policies, so one request or document cannot make a
// node allocate without limit.
const (
	// MaxValueLen and MaxCustom are extract's: what an extractor reads from
	// an HTTP request must be a request Validate accepts.
	MaxValueLen     = extract.MaxValueLen
	MaxCustom       = extract.MaxCustom
	MaxNameLen      = 128
	maxCustomName   = extract.MaxCustomName
	maxKeyParts     = 16
	maxPatterns     = 1024
	maxLimits       = 16
	maxLevels       = 8
	maxBands        = 16
	maxExempt       = 1024
	maxErrors       = 20
	maxExtendsDepth = 32
)

// descRef names a descriptor: a standard one, or a custom one by name.
type descRef struct {
	d    desc
	name string // without "custom." for custom ones
}

func (r descRef) String() string {
	if r.d == dCustom {
		return "custom." + r.name
	}
	return descNames[r.d]
}

// lookupDesc resolves a descriptor name as written in scope, key or exempt.
func lookupDesc(name string) (descRef, error) {
	for i, n := range descNames {
		if n == name {
			return descRef{d: desc(i)}, nil
		}
	}
	if c, ok := strings.CutPrefix(name, "custom."); ok {
		if !validName(c, maxCustomName) {
			return descRef{}, fmt.Errorf("custom descriptor %q: the name must be 1..%d of [a-z0-9_.-]", name, maxCustomName)
		}
		return descRef{d: dCustom, name: c}, nil
	}
	return descRef{}, fmt.Errorf("unknown descriptor %q (known: %s; custom descriptors are written custom.<name>)", name, knownDescs)
}

// validName: [a-z0-9_.-]{1,max}, the syntax of policy ids and custom names.
func validName(s string, max int) bool { return extract.ValidName(s, max) }

// Request is one request's descriptors. Zero value = no descriptors.
type Request struct {
	TenantID, APIKeyID, UserID, IP, Route, Method, Service, Region, TenantTier string
	// Custom holds custom descriptors by name without the "custom." prefix.
	Custom         map[string]string
	RiskScore      float64
	HasRisk        bool
	IdempotencyKey string
	// Cost is what the request takes from every bucket; 0 means 1.
	Cost int64
	// Memory recalls subjects' risk for policies with risk.memory; nil:
	// only the request's own score counts.
	Memory RiskRecaller
}

// RequestOf is what an extractor read from an HTTP request as a request
// (cost 0: one unit). Its values already pass Validate: extract cleans
// them to policy's bounds.
func RequestOf(e extract.Extracted) Request {
	return Request{TenantID: e.TenantID, APIKeyID: e.APIKeyID, UserID: e.UserID, IP: e.IP, Route: e.Route,
		Method: e.Method, Service: e.Service, Region: e.Region, TenantTier: e.TenantTier, Custom: e.Custom}
}

// RiskRecaller is a memory of subjects' risk scores, which the policy
// package leaves to its caller (it keeps no state and reads no clock).
type RiskRecaller interface {
	// Recall returns the score that counts for subject at now: the
	// larger of the request's (if it has one) and the remembered one
	// halved for every halfLife since it was remembered, and whether
	// there is any. A recaller that learns keeps the result.
	Recall(subject string, score float64, has bool, halfLife time.Duration, now time.Time) (float64, bool)
}

func (r *Request) field(d desc) *string {
	switch d {
	case dTenantID:
		return &r.TenantID
	case dAPIKeyID:
		return &r.APIKeyID
	case dUserID:
		return &r.UserID
	case dIP:
		return &r.IP
	case dRoute:
		return &r.Route
	case dMethod:
		return &r.Method
	case dService:
		return &r.Service
	case dRegion:
		return &r.Region
	case dTenantTier:
		return &r.TenantTier
	}
	return nil
}

// value is the request's value of a descriptor; "" means absent.
func (r *Request) value(ref descRef) string {
	if ref.d == dCustom {
		return r.Custom[ref.name]
	}
	return *r.field(ref.d)
}

// Set sets a descriptor by its name ("tenant_id", "custom.foo", "risk_score",
// "idempotency_key", "cost"); an unknown name or a bad value is an error
// naming it. For the CLI's --descriptor k=v and the HTTP/gRPC front ends.
func (r *Request) Set(name, value string) error { return invalid(r.set(name, value)) }

func (r *Request) set(name, value string) error {
	switch name {
	case "risk_score":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || !(f >= 0 && f <= 1) {
			return fmt.Errorf("policy: risk_score %q: want a number in [0, 1]", value)
		}
		r.RiskScore, r.HasRisk = f, true
		return nil
	case "idempotency_key":
		r.IdempotencyKey = value
		return nil
	case "cost":
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("policy: cost %q: want a whole number >= 0", value)
		}
		r.Cost = n
		return nil
	}
	ref, err := lookupDesc(name)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if ref.d != dCustom {
		*r.field(ref.d) = value
		return nil
	}
	if r.Custom == nil {
		r.Custom = map[string]string{}
	}
	r.Custom[ref.name] = value
	return nil
}

// Validate bounds a request: each value at most MaxValueLen bytes of valid
// UTF-8 without control characters, at most MaxCustom custom descriptors,
// risk in [0,1], cost >= 0. The error names the descriptor.
func (r *Request) Validate() error { return invalid(r.validate()) }

func (r *Request) validate() error {
	for d := desc(0); d < numDescs; d++ {
		if err := checkValue(descNames[d], *r.field(d)); err != nil {
			return err
		}
	}
	if len(r.Custom) > MaxCustom {
		return fmt.Errorf("policy: %d custom descriptors, at most %d", len(r.Custom), MaxCustom)
	}
	for k, v := range r.Custom {
		if !validName(k, maxCustomName) {
			return fmt.Errorf("policy: custom descriptor %q: the name must be 1..%d of [a-z0-9_.-]", k, maxCustomName)
		}
		if err := checkValue("custom."+k, v); err != nil {
			return err
		}
	}
	if err := checkValue("idempotency_key", r.IdempotencyKey); err != nil {
		return err
	}
	if r.HasRisk && !(r.RiskScore >= 0 && r.RiskScore <= 1) {
		return fmt.Errorf("policy: risk_score %v: want a number in [0, 1]", r.RiskScore)
	}
	if r.Cost < 0 {
		return fmt.Errorf("policy: cost %d: want >= 0", r.Cost)
	}
	return nil
}

func checkValue(name, v string) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("policy: %s: %d bytes, at most %d", name, len(v), MaxValueLen)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("policy: %s: not valid UTF-8", name)
	}
	for _, c := range v {
		if unicode.IsControl(c) {
			return fmt.Errorf("policy: %s: control character %U", name, c)
		}
	}
	return nil
}
