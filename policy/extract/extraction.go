// Package extract reads rate-limit descriptors from HTTP requests as a
// policy set's extraction says.
package extract

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
)

// Extraction is how descriptors are read from an HTTP request, as written
// in the policy document's `extraction:` section (YAML or JSON). It is
// replicated and versioned with the policies, so every node and every
// embedded limiter watching the set reads a request alike. The zero value
// (and nil) means the defaults (Default).
type Extraction struct {
	// Headers maps a standard descriptor (tenant_id, api_key_id, user_id,
	// tenant_tier, service, region, route, method) to the request header
	// it is read from. A descriptor not named keeps its default header;
	// one named with "" is not read at all.
	Headers map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
	// Custom maps a custom descriptor's name (without "custom.") to the
	// header it is read from: at most MaxCustom.
	Custom map[string]string `json:"custom,omitempty" yaml:"custom,omitempty"`
	// TrustedProxies are the CIDRs (or single addresses) of the proxies
	// whose client IP headers are believed. Empty: the connection's peer is
	// the client, whatever the headers say.
	TrustedProxies []string `json:"trusted_proxies,omitempty" yaml:"trusted_proxies,omitempty"`
	// ClientIPHeaders are tried in order when the peer is trusted (default
	// X-Forwarded-For, then X-Real-IP). X-Forwarded-For is walked right to
	// left past trusted hops; any other header holds one address.
	ClientIPHeaders []string `json:"client_ip_headers,omitempty" yaml:"client_ip_headers,omitempty"`
}

// Bounds of what is extracted. They are the policy package's bounds on a
// check's descriptors (policy.MaxValueLen and policy.MaxCustom are these
// constants), kept here because this package cannot import policy and
// what it extracts must be a request policy accepts.
const (
	// MaxValueLen is the longest value Extract returns.
	MaxValueLen = 256
	// MaxCustom is the most custom descriptors an extraction names.
	MaxCustom = 32
	// MaxCustomName bounds a custom descriptor's name.
	MaxCustomName = 64
)

// The default headers of the standard descriptors. tenant_tier, service
// and region have none: a tier read from a header a client can set would
// let the client pick its plan.
var defaultHeaders = map[string]string{
	"tenant_id":  "X-Tenant-Id",
	"api_key_id": "X-Api-Key-Id",
	"user_id":    "X-User-Id",
	"route":      "X-Forwarded-Uri",
	"method":     "X-Forwarded-Method",
}

// headerDescs are the descriptors Headers may name (ip is derived from the
// connection; risk_score, cost and idempotency_key are not descriptors of
// a request's identity).
var headerDescs = []string{"tenant_id", "api_key_id", "user_id", "tenant_tier", "service", "region", "route", "method"}

var defaultClientIPHeaders = []string{"X-Forwarded-For", "X-Real-Ip"}

// Bounds of an extraction: it is in every node's memory and walked per request.
const (
	maxTrustedProxies = 1024
	maxHeaderName     = 128
	maxClientIPHdrs   = 4
	// maxForwardedHops bounds the X-Forwarded-For entries walked: a chain
	// longer than this is not one real proxies make.
	maxForwardedHops = 64
	// maxErrors bounds the problems one error lists, as policy's parser
	// bounds a document's.
	maxErrors = 20
)

// ErrInvalid is what Compile's error wraps, for errors.Is: the extraction
// is refused. Front ends answer InvalidArgument or HTTP 400.
var ErrInvalid = errors.New("extract: invalid extraction")

// Problem is one field of an extraction that is wrong.
type Problem struct {
	// Path is the field below extraction: "headers.ip", "trusted_proxies[1]".
	Path string
	// Msg says what is wrong with it.
	Msg string
}

// Extractor is an Extraction compiled; safe for concurrent use.
type Extractor struct {
	src *Extraction // as written; nil for the defaults
	// The header of each standard descriptor, canonical, "" for none.
	tenant, apiKey, user, tier, service, region, route, method string
	custom                                                     []customHeader // sorted by name
	trusted                                                    []netip.Prefix
	ipHeaders                                                  []string
}

type customHeader struct{ name, header string }

var defaultExtractor = mustCompile(nil)

func mustCompile(e *Extraction) *Extractor {
	x, err := Compile(e)
	if err != nil {
		panic(err)
	}
	return x
}

// Default reads the default headers and believes no proxy.
func Default() *Extractor { return defaultExtractor }

// Extraction is the extraction as written; nil for the defaults.
func (x *Extractor) Extraction() *Extraction { return x.src }

// Compile checks e and compiles it; nil compiles to the defaults. The
// error names the field. Its messages keep the "policy: extraction."
// prefix: they name a field of the policy document, whatever reads it.
func Compile(e *Extraction) (*Extractor, error) {
	x, probs := compile(e)
	if len(probs) == 0 {
		return x, nil
	}
	errs := make([]error, 0, min(len(probs), maxErrors+1))
	for _, p := range probs {
		if len(errs) == maxErrors {
			errs = append(errs, errors.New("(more errors not shown)"))
			break
		}
		errs = append(errs, fmt.Errorf("policy: extraction.%s: %s", p.Path, p.Msg))
	}
	return nil, kindError{errors.Join(errs...)}
}

// Problems is what is wrong with e, field by field (nil if nothing), so a
// parser can put each at its field's position.
func Problems(e *Extraction) []Problem {
	_, probs := compile(e)
	return probs
}

// Same reports whether a and b say the same (nil and the zero Extraction
// both mean the defaults).
func Same(a, b *Extraction) bool {
	return string(canonical(a)) == string(canonical(b))
}

// Normal is e, or nil when e says nothing (the defaults): what the
// replicated set stores, so that `extraction: {}` changes nothing.
func Normal(e *Extraction) *Extraction {
	if Same(e, nil) {
		return nil
	}
	return e
}

func canonical(e *Extraction) []byte {
	if e == nil {
		e = &Extraction{}
	}
	b, _ := json.Marshal(e) // cannot fail: maps and lists of strings
	return b
}

// kindError gives an error's message unchanged and lets errors.Is find
// ErrInvalid.
type kindError struct{ err error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.err, ErrInvalid} }

// compiler gathers an Extractor and the problems met making it.
type compiler struct {
	x     *Extractor
	probs []Problem
}

func (c *compiler) fail(path, msg string) { c.probs = append(c.probs, Problem{path, msg}) }

// compile compiles e, field by field in a fixed order so that the
// problems come out alike every time.
func compile(e *Extraction) (*Extractor, []Problem) {
	c := &compiler{x: &Extractor{src: e}}
	hdr := maps.Clone(defaultHeaders)
	ipHeaders := defaultClientIPHeaders
	if e != nil {
		c.headers(e.Headers, hdr)
		c.customs(e.Custom)
		c.proxies(e.TrustedProxies)
		if e.ClientIPHeaders != nil {
			ipHeaders = e.ClientIPHeaders
			c.clientIPHeaders(ipHeaders)
		}
	}
	canon := func(k string) string {
		if hdr[k] == "" {
			return ""
		}
		return textproto.CanonicalMIMEHeaderKey(hdr[k])
	}
	x := c.x
	x.tenant, x.apiKey, x.user, x.tier = canon("tenant_id"), canon("api_key_id"), canon("user_id"), canon("tenant_tier")
	x.service, x.region, x.route, x.method = canon("service"), canon("region"), canon("route"), canon("method")
	for _, h := range ipHeaders {
		x.ipHeaders = append(x.ipHeaders, textproto.CanonicalMIMEHeaderKey(h))
	}
	return x, c.probs
}

// headers sets hdr's entries from the extraction's headers.
func (c *compiler) headers(m map[string]string, hdr map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if !slices.Contains(headerDescs, k) {
			c.fail("headers."+k, fmt.Sprintf("unknown descriptor (known: %s; custom ones go under custom)", strings.Join(headerDescs, ", ")))
			continue
		}
		if v != "" && !validHeaderName(v) {
			c.fail("headers."+k, fmt.Sprintf("%q: want a header name (1..%d letters, digits and !#$%%&'*+-.^_`|~), or \"\" to read none", v, maxHeaderName))
			continue
		}
		hdr[k] = v
	}
}

func (c *compiler) customs(m map[string]string) {
	if len(m) > MaxCustom {
		c.fail("custom", fmt.Sprintf("%d custom descriptors, at most %d", len(m), MaxCustom))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch {
		case !validCustomName(k):
			c.fail("custom."+k, fmt.Sprintf("the name must be 1..%d of [a-z0-9_.-]", MaxCustomName))
		case !validHeaderName(v):
			c.fail("custom."+k, fmt.Sprintf("%q: want a header name (1..%d letters, digits and !#$%%&'*+-.^_`|~)", v, maxHeaderName))
		default:
			c.x.custom = append(c.x.custom, customHeader{k, textproto.CanonicalMIMEHeaderKey(v)})
		}
	}
}

func (c *compiler) proxies(list []string) {
	if len(list) > maxTrustedProxies {
		c.fail("trusted_proxies", fmt.Sprintf("%d entries, at most %d", len(list), maxTrustedProxies))
	}
	for i, s := range list {
		p, err := parsePrefix(s)
		if err != nil {
			c.fail(fmt.Sprintf("trusted_proxies[%d]", i), fmt.Sprintf("%q: want a CIDR (10.0.0.0/8) or an address", s))
			continue
		}
		c.x.trusted = append(c.x.trusted, p)
	}
}

func (c *compiler) clientIPHeaders(list []string) {
	if len(list) > maxClientIPHdrs {
		c.fail("client_ip_headers", fmt.Sprintf("%d headers, at most %d", len(list), maxClientIPHdrs))
	}
	for i, h := range list {
		if !validHeaderName(h) {
			c.fail(fmt.Sprintf("client_ip_headers[%d]", i), fmt.Sprintf("%q: want a header name", h))
		}
	}
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// validHeaderName: an RFC 9110 token of at most maxHeaderName bytes.
func validHeaderName(s string) bool {
	if s == "" || len(s) > maxHeaderName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validCustomName is the syntax of a custom descriptor's name.
func validCustomName(s string) bool { return ValidName(s, MaxCustomName) }

// ValidName reports whether s is 1..max of [a-z0-9_.-]: the syntax of
// policy ids and custom descriptor names (package policy uses it too).
func ValidName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
