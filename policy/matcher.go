package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

type patKind uint8

const (
	patExact  patKind = iota
	patAny            // "*": present with any value
	patPrefix         // "/v1/*"
	patCIDR           // ip only: an address or a range
	patAbsent         // "" or null
)

type pattern struct {
	kind patKind
	s    string // exact value or prefix; upper case for method
	cidr netip.Prefix
}

// cond is one descriptor's constraint: any of its patterns.
type cond struct {
	ref  descRef
	pats []pattern
}

func compilePattern(ref descRef, s string) (pattern, error) {
	if len(s) > MaxValueLen {
		return pattern{}, fmt.Errorf("%d bytes, at most %d", len(s), MaxValueLen)
	}
	switch {
	case s == "":
		return pattern{kind: patAbsent}, nil
	case s == "*":
		return pattern{kind: patAny}, nil
	case ref.d == dIP:
		return ipPattern(s)
	}
	if ref.d == dMethod {
		s = strings.ToUpper(s)
	}
	if p, ok := strings.CutSuffix(s, "*"); ok {
		return pattern{kind: patPrefix, s: p}, nil
	}
	return pattern{kind: patExact, s: s}, nil
}

func ipPattern(s string) (pattern, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return pattern{}, fmt.Errorf("%q: not an IP address or CIDR range", s)
		}
		return pattern{kind: patCIDR, cidr: pfx.Masked()}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return pattern{}, fmt.Errorf("%q: not an IP address or CIDR range", s)
	}
	a = a.Unmap()
	return pattern{kind: patCIDR, cidr: netip.PrefixFrom(a, a.BitLen())}, nil
}

// compileScope turns a scope into conditions, in a fixed order (by name)
// so two compilations agree. fail gets each bad field's path.
func compileScope(s map[string]Patterns, fail func(path string, err error)) []cond {
	var out []cond
	for _, name := range sortedKeys(s) {
		path := "scope." + name
		ref, err := lookupDesc(name)
		if err != nil {
			fail(path, err)
			continue
		}
		if len(s[name]) == 0 || len(s[name]) > maxPatterns {
			fail(path, fmt.Errorf("want 1..%d patterns", maxPatterns))
			continue
		}
		c := cond{ref: ref}
		for i, v := range s[name] {
			pat, err := compilePattern(ref, v)
			if err != nil {
				p := path
				if len(s[name]) > 1 {
					p = fmt.Sprintf("%s[%d]", path, i)
				}
				fail(p, err)
			}
			c.pats = append(c.pats, pat)
		}
		out = append(out, c)
	}
	return out
}

// match reports whether value v (after ip parsing, addr) satisfies c.
func (c *cond) match(v string, addr netip.Addr) bool {
	for i := range c.pats {
		if c.pats[i].match(c.ref.d, v, addr) {
			return true
		}
	}
	return false
}

func (p *pattern) match(d desc, v string, addr netip.Addr) bool {
	if v == "" {
		return p.kind == patAbsent
	}
	switch p.kind {
	case patAny:
		return true
	case patExact:
		if d == dMethod {
			return strings.EqualFold(v, p.s)
		}
		return v == p.s
	case patPrefix:
		if d == dMethod {
			return len(v) >= len(p.s) && strings.EqualFold(v[:len(p.s)], p.s)
		}
		return strings.HasPrefix(v, p.s)
	case patCIDR:
		return addr.IsValid() && p.cidr.Contains(addr)
	}
	return false
}

// overlaps reports whether some value satisfies both patterns.
func (p *pattern) overlaps(q *pattern) bool {
	if p.kind == patAbsent || q.kind == patAbsent {
		return p.kind == q.kind
	}
	if p.kind == patAny || q.kind == patAny {
		return true
	}
	if p.kind > q.kind {
		p, q = q, p
	}
	switch {
	case p.kind == patExact && q.kind == patExact:
		return p.s == q.s
	case p.kind == patExact && q.kind == patPrefix:
		return strings.HasPrefix(p.s, q.s)
	case p.kind == patPrefix && q.kind == patPrefix:
		return strings.HasPrefix(p.s, q.s) || strings.HasPrefix(q.s, p.s)
	case p.kind == patCIDR && q.kind == patCIDR:
		return p.cidr.Overlaps(q.cidr)
	}
	return false
}

func (c *cond) overlaps(o *cond) bool {
	for i := range c.pats {
		for j := range o.pats {
			if c.pats[i].overlaps(&o.pats[j]) {
				return true
			}
		}
	}
	return false
}

// exacts returns c's values if every pattern is exact, for the index.
func (c *cond) exacts() ([]string, bool) {
	vals := make([]string, len(c.pats))
	for i, p := range c.pats {
		if p.kind != patExact || c.ref.d == dMethod {
			return nil, false
		}
		vals[i] = p.s
	}
	return vals, true
}
