package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Extraction is how descriptors are read from an HTTP request, as written
// in the policy document's `extraction:` section (YAML or JSON). It is
// replicated and versioned with the policies, so every node and every
// embedded limiter watching the set reads a request alike. The zero value
// (and nil) means the defaults (DefaultExtractor).
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
)

// Extractor is an Extraction compiled; safe for concurrent use.
type Extractor struct {
	src *Extraction // as written; nil for the defaults
	// hdr is the header of each standard descriptor, canonical, "" for none.
	tenant, apiKey, user, tier, service, region, route, method string
	custom                                                     []customHeader // sorted by name
	trusted                                                    []netip.Prefix
	ipHeaders                                                  []string
}

type customHeader struct{ name, header string }

var defaultExtractor = mustExtractor(nil)

func mustExtractor(e *Extraction) *Extractor {
	x, err := CompileExtraction(e)
	if err != nil {
		panic(err)
	}
	return x
}

// DefaultExtractor reads the default headers and believes no proxy.
func DefaultExtractor() *Extractor { return defaultExtractor }

// Extraction is the extraction as written; nil for the defaults.
func (x *Extractor) Extraction() *Extraction { return x.src }

// CompileExtraction checks e and compiles it; nil compiles to the defaults.
// The error names the field.
func CompileExtraction(e *Extraction) (*Extractor, error) {
	var errs []error
	x := compileExtraction(e, func(path, msg string) {
		errs = append(errs, fmt.Errorf("policy: extraction.%s: %s", path, msg))
	})
	if len(errs) > 0 {
		return nil, invalid(joinErrs(errs))
	}
	return x, nil
}

// compileExtraction compiles e, telling fail of each field that is wrong
// (by its path below extraction), so the parser can give positions.
func compileExtraction(e *Extraction, fail func(path, msg string)) *Extractor {
	x := &Extractor{src: e}
	hdr := map[string]string{}
	for k, v := range defaultHeaders {
		hdr[k] = v
	}
	ipHeaders := defaultClientIPHeaders
	if e != nil {
		for _, k := range sortedKeys(e.Headers) {
			v := e.Headers[k]
			if !slices.Contains(headerDescs, k) {
				fail("headers."+k, fmt.Sprintf("unknown descriptor (known: %s; custom ones go under custom)", strings.Join(headerDescs, ", ")))
				continue
			}
			if v != "" && !validHeaderName(v) {
				fail("headers."+k, fmt.Sprintf("%q: want a header name (1..%d letters, digits and !#$%%&'*+-.^_`|~), or \"\" to read none", v, maxHeaderName))
				continue
			}
			hdr[k] = v
		}
		if len(e.Custom) > MaxCustom {
			fail("custom", fmt.Sprintf("%d custom descriptors, at most %d", len(e.Custom), MaxCustom))
		}
		for _, k := range sortedKeys(e.Custom) {
			v := e.Custom[k]
			switch {
			case !validName(k, maxCustomName):
				fail("custom."+k, fmt.Sprintf("the name must be 1..%d of [a-z0-9_.-]", maxCustomName))
			case !validHeaderName(v):
				fail("custom."+k, fmt.Sprintf("%q: want a header name (1..%d letters, digits and !#$%%&'*+-.^_`|~)", v, maxHeaderName))
			default:
				x.custom = append(x.custom, customHeader{k, textproto.CanonicalMIMEHeaderKey(v)})
			}
		}
		if len(e.TrustedProxies) > maxTrustedProxies {
			fail("trusted_proxies", fmt.Sprintf("%d entries, at most %d", len(e.TrustedProxies), maxTrustedProxies))
		}
		for i, s := range e.TrustedProxies {
			p, err := parsePrefix(s)
			if err != nil {
				fail(fmt.Sprintf("trusted_proxies[%d]", i), fmt.Sprintf("%q: want a CIDR (10.0.0.0/8) or an address", s))
				continue
			}
			x.trusted = append(x.trusted, p)
		}
		if e.ClientIPHeaders != nil {
			ipHeaders = e.ClientIPHeaders
			if len(ipHeaders) > maxClientIPHdrs {
				fail("client_ip_headers", fmt.Sprintf("%d headers, at most %d", len(ipHeaders), maxClientIPHdrs))
			}
			for i, h := range ipHeaders {
				if !validHeaderName(h) {
					fail(fmt.Sprintf("client_ip_headers[%d]", i), fmt.Sprintf("%q: want a header name", h))
				}
			}
		}
	}
	c := func(k string) string {
		if hdr[k] == "" {
			return ""
		}
		return textproto.CanonicalMIMEHeaderKey(hdr[k])
	}
	x.tenant, x.apiKey, x.user, x.tier = c("tenant_id"), c("api_key_id"), c("user_id"), c("tenant_tier")
	x.service, x.region, x.route, x.method = c("service"), c("region"), c("route"), c("method")
	for _, h := range ipHeaders {
		x.ipHeaders = append(x.ipHeaders, textproto.CanonicalMIMEHeaderKey(h))
	}
	return x
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

// Extracted is what Extract read: the standard descriptors and the custom
// ones (nil when none was present). Every value is clean (see Extract).
type Extracted struct {
	TenantID, APIKeyID, UserID, IP, Route, Method, Service, Region, TenantTier string
	Custom                                                                     map[string]string
}

// Request is e as a descriptor request (cost 0: one unit).
func (e *Extracted) Request() Request {
	return Request{TenantID: e.TenantID, APIKeyID: e.APIKeyID, UserID: e.UserID, IP: e.IP, Route: e.Route,
		Method: e.Method, Service: e.Service, Region: e.Region, TenantTier: e.TenantTier, Custom: e.Custom}
}

// Extract reads r's descriptors. r.RemoteAddr is the connection's peer.
//
// Values are made acceptable rather than refused, so that a request with
// an odd header still gets a decision instead of an error its proxy would
// turn into a denial: invalid UTF-8 and control characters become U+FFFD,
// and a value longer than MaxValueLen keeps its first bytes followed by
// "~" and 16 hex digits of the SHA-256 of the whole value, so that two
// long values stay two keys. An empty header is absent.
func (x *Extractor) Extract(r *http.Request) Extracted {
	h := r.Header
	e := Extracted{
		TenantID: x.read(h, x.tenant), APIKeyID: x.read(h, x.apiKey), UserID: x.read(h, x.user),
		TenantTier: x.read(h, x.tier), Service: x.read(h, x.service), Region: x.read(h, x.region),
	}
	// Cleaned last: cutting the query, or upper-casing, must not undo the bound.
	e.Route = clean(routeOf(x.raw(h, x.route)))
	if e.Route == "" && r.URL != nil {
		e.Route = clean(r.URL.Path)
	}
	method := x.raw(h, x.method)
	if method == "" {
		method = r.Method
	}
	e.Method = clean(strings.ToUpper(method))
	for _, c := range x.custom {
		if v := x.read(h, c.header); v != "" {
			if e.Custom == nil {
				e.Custom = make(map[string]string, len(x.custom))
			}
			e.Custom[c.name] = v
		}
	}
	if ip := x.clientIP(r); ip.IsValid() {
		e.IP = ip.String()
	}
	return e
}

func (x *Extractor) read(h http.Header, name string) string { return clean(x.raw(h, name)) }

// raw is header name's first value, trimmed; "" if there is none.
func (x *Extractor) raw(h http.Header, name string) string {
	if name == "" {
		return ""
	}
	vs := h[name]
	if len(vs) == 0 {
		return ""
	}
	return strings.TrimSpace(vs[0])
}

// routeOf is the path of a forwarded URI: no query, no fragment, and for
// an absolute URI no scheme and host.
func routeOf(uri string) string {
	if i := strings.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	if i := strings.Index(uri, "://"); i >= 0 && !strings.HasPrefix(uri, "/") {
		rest := uri[i+3:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			return "/"
		}
		uri = rest[j:]
	}
	return uri
}

// clean makes v a value a check accepts (see Extract).
func clean(v string) string {
	if v == "" {
		return ""
	}
	ok := utf8.ValidString(v)
	for _, c := range v {
		if unicode.IsControl(c) {
			ok = false
			break
		}
	}
	s := v
	if !ok {
		var b strings.Builder
		for _, c := range strings.ToValidUTF8(v, "\uFFFD") {
			if unicode.IsControl(c) {
				c = utf8.RuneError
			}
			b.WriteRune(c)
		}
		s = b.String()
	}
	if len(s) <= MaxValueLen {
		return s
	}
	sum := sha256.Sum256([]byte(v))
	const suffix = 1 + 16
	cut := MaxValueLen - suffix
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "~" + hex.EncodeToString(sum[:8])
}

// clientIP is the connection's peer, or, when the peer is a trusted proxy,
// the address its headers name: X-Forwarded-For walked from the right past
// trusted hops (the first untrusted one is the client; all trusted, the
// leftmost), or another header's one address.
func (x *Extractor) clientIP(r *http.Request) netip.Addr {
	peer := parseHostPort(r.RemoteAddr)
	if !peer.IsValid() || !x.isTrusted(peer) {
		return peer
	}
	for _, name := range x.ipHeaders {
		vs := r.Header[name]
		if len(vs) == 0 {
			continue
		}
		if name != "X-Forwarded-For" {
			if a, err := netip.ParseAddr(strings.TrimSpace(vs[0])); err == nil {
				return a.Unmap()
			}
			continue
		}
		if a, ok := x.walkForwarded(vs); ok {
			return a
		}
	}
	return peer
}

// walkForwarded walks X-Forwarded-For's hops (over every such header, in
// order) from the right. A hop that is not an address ends the walk at the
// last good one: what is left of it was written by someone untrusted.
func (x *Extractor) walkForwarded(vs []string) (netip.Addr, bool) {
	var last netip.Addr
	hops := 0
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		for v != "" && hops < maxForwardedHops {
			var hop string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = v[j+1:], v[:j]
			} else {
				hop, v = v, ""
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			hops++
			a := parseHostPort(hop)
			if !a.IsValid() {
				return last, last.IsValid()
			}
			if !x.isTrusted(a) {
				return a, true
			}
			last = a
		}
	}
	return last, last.IsValid()
}

func (x *Extractor) isTrusted(a netip.Addr) bool {
	for _, p := range x.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHostPort reads "ip", "ip:port", "[ipv6]:port" or "[ipv6]"; the zero
// Addr if it is none.
func parseHostPort(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}
