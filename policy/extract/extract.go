package extract

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Extracted is what Extract read: the standard descriptors and the custom
// ones (nil when none was present). Every value is clean (see Extract).
type Extracted struct {
	TenantID, APIKeyID, UserID, IP, Route, Method, Service, Region, TenantTier string
	Custom                                                                     map[string]string
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
