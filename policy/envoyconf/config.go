package envoyconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Bounds on one file, so a document cannot make the importer (or a node
// building its Index) allocate without limit.
const (
	MaxFile     = 16 << 20
	MaxNodes    = 100_000
	MaxDepth    = 16
	MaxValueLen = 256
	maxErrors   = 20
)

// Unit is a rate limit's unit, as the reference names them.
type Unit string

// units are the reference's units and their lengths in seconds (a month
// is 30 days, a year 365, as the reference counts them).
var units = map[Unit]int64{
	"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400,
	"WEEK": 7 * 86400, "MONTH": 30 * 86400, "YEAR": 365 * 86400,
}

// Seconds is the unit's length; 0 for an unknown unit.
func (u Unit) Seconds() int64 { return units[u] }

// Config is one file: a domain per YAML document.
type Config struct {
	Domains []Domain
}

// Domain is one domain's tree.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
}

// Descriptor is one node of the tree as written.
type Descriptor struct {
	Key, Value  string
	RateLimit   *RateLimit // nil: no rate_limit
	ShadowMode  bool
	Descriptors []*Descriptor
	line        int
}

// RateLimit is a node's rate_limit.
type RateLimit struct {
	Unit            Unit // upper case; "" when unlimited
	RequestsPerUnit uint32
	Unlimited       bool
	Name            string
	Replaces        []string
}

// Parse reads a reference configuration file (one or more YAML documents,
// each a domain). Every error names the file, the line and the field; at
// most 20 are reported, joined.
func Parse(name string, data []byte) (*Config, error) {
	if len(data) > MaxFile {
		return nil, fmt.Errorf("envoyconf: %s: %d bytes, at most %d", name, len(data), MaxFile)
	}
	p := &parser{file: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	cfg := &Config{}
	seen := map[string]bool{}
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("envoyconf: %s: %v", name, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
			continue // an empty document, as after a leading ---
		}
		d, ok := p.domain(doc.Content[0])
		if !ok {
			continue
		}
		if seen[d.Name] {
			p.fail(doc.Content[0], "domain", "duplicate domain %q in the file", d.Name)
			continue
		}
		seen[d.Name] = true
		cfg.Domains = append(cfg.Domains, d)
		if len(p.errs) >= maxErrors {
			break
		}
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	if len(cfg.Domains) == 0 {
		return nil, fmt.Errorf("envoyconf: %s: no domain in the file", name)
	}
	return cfg, nil
}

type parser struct {
	file  string
	errs  []error
	nodes int
}

func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	p.errs = append(p.errs, fmt.Errorf("envoyconf: %s:%d:%d: %s", p.file, n.Line, n.Column, msg))
}

// fields walks a mapping, refusing keys it does not know, as the reference
// does (a misspelt key is an error, not a silent default).
func (p *parser) fields(m *yaml.Node, path string, known string, f func(k string, v *yaml.Node)) bool {
	if m.Kind == yaml.AliasNode {
		p.fail(m, path, "YAML aliases are not accepted")
		return false
	}
	if m.Kind != yaml.MappingNode {
		p.fail(m, path, "want a mapping")
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.fail(k, path, "a key must be a string")
			continue
		}
		if !strings.Contains(","+known+",", ","+k.Value+",") {
			p.fail(k, join(path, k.Value), "unknown key (known: %s)", strings.ReplaceAll(known, ",", ", "))
			continue
		}
		if seen[k.Value] {
			p.fail(k, join(path, k.Value), "written twice")
			continue
		}
		seen[k.Value] = true
		if v.Kind == yaml.AliasNode {
			p.fail(v, join(path, k.Value), "YAML aliases are not accepted")
			continue
		}
		f(k.Value, v)
	}
	return true
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func (p *parser) domain(n *yaml.Node) (Domain, bool) {
	var d Domain
	var descs *yaml.Node
	if !p.fields(n, "", "domain,descriptors", func(k string, v *yaml.Node) {
		switch k {
		case "domain":
			d.Name = p.text(v, "domain")
		case "descriptors":
			descs = v
		}
	}) {
		return d, false
	}
	if d.Name == "" {
		p.fail(n, "domain", "a config file cannot have an empty domain")
		return d, false
	}
	if descs != nil {
		d.Descriptors = p.descriptors(descs, "descriptors", 1)
	}
	return d, true
}

func (p *parser) descriptors(n *yaml.Node, path string, depth int) []*Descriptor {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(n, path, "want a list of descriptors")
		return nil
	}
	if depth > MaxDepth {
		p.fail(n, path, "nested deeper than %d", MaxDepth)
		return nil
	}
	var out []*Descriptor
	seen := map[[2]string]bool{}
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if p.nodes++; p.nodes > MaxNodes {
			p.fail(e, ep, "more than %d descriptors in the file", MaxNodes)
			return out
		}
		d := p.descriptor(e, ep, depth)
		if d == nil {
			continue
		}
		if seen[[2]string{d.Key, d.Value}] {
			p.fail(e, ep, "duplicate descriptor: key %q value %q is already at this level", d.Key, d.Value)
			continue
		}
		seen[[2]string{d.Key, d.Value}] = true
		out = append(out, d)
	}
	return out
}

const descriptorKeys = "key,value,rate_limit,descriptors,shadow_mode,quota_mode,detailed_metric,value_to_metric,share_threshold,metadata"

func (p *parser) descriptor(n *yaml.Node, path string, depth int) *Descriptor {
	d := &Descriptor{line: n.Line}
	var rl, nested *yaml.Node
	ok := p.fields(n, path, descriptorKeys, func(k string, v *yaml.Node) {
		switch k {
		case "key":
			d.Key = p.text(v, join(path, k))
		case "value":
			d.Value = p.text(v, join(path, k))
		case "rate_limit":
			rl = v
		case "descriptors":
			nested = v
		case "shadow_mode":
			d.ShadowMode = p.bool(v, join(path, k))
		case "quota_mode", "share_threshold":
			if p.bool(v, join(path, k)) {
				p.fail(v, join(path, k), "not supported by quorate (leave it out or false)")
			}
		case "detailed_metric", "value_to_metric":
			p.bool(v, join(path, k)) // statistics only: accepted, ignored
		case "metadata":
			// dynamic metadata only: accepted, ignored
		}
	})
	if !ok {
		return nil
	}
	if d.Key == "" {
		p.fail(n, join(path, "key"), "a descriptor has an empty key")
		return nil
	}
	if rl != nil && !(rl.Kind == yaml.ScalarNode && rl.Tag == "!!null") {
		d.RateLimit = p.rateLimit(rl, join(path, "rate_limit"))
	}
	if nested != nil {
		d.Descriptors = p.descriptors(nested, join(path, "descriptors"), depth+1)
	}
	return d
}

func (p *parser) rateLimit(n *yaml.Node, path string) *RateLimit {
	r := &RateLimit{}
	var unit string
	var unitNode *yaml.Node
	ok := p.fields(n, path, "unit,requests_per_unit,unlimited,name,replaces", func(k string, v *yaml.Node) {
		switch k {
		case "unit":
			unit, unitNode = p.text(v, join(path, k)), v
		case "requests_per_unit":
			s := p.text(v, join(path, k))
			u, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				p.fail(v, join(path, k), "%q: want a whole number from 0 to %d", s, uint32(1<<32-1))
			}
			r.RequestsPerUnit = uint32(u)
		case "unlimited":
			r.Unlimited = p.bool(v, join(path, k))
		case "name":
			r.Name = p.text(v, join(path, k))
		case "replaces":
			r.Replaces = p.replaces(v, join(path, k))
		}
	})
	if !ok {
		return nil
	}
	u := Unit(strings.ToUpper(unit))
	valid := u.Seconds() > 0
	switch {
	case r.Unlimited && valid:
		p.fail(unitNode, join(path, "unit"), "should not specify a rate limit unit when unlimited")
	case r.Unlimited:
		// no unit, as it should be
	case !valid:
		at := unitNode
		if at == nil {
			at = n
		}
		p.fail(at, join(path, "unit"), "invalid rate limit unit %q (use second, minute, hour, day, week, month or year)", unit)
	default:
		r.Unit = u
	}
	for _, name := range r.Replaces {
		if name == r.Name {
			p.fail(n, join(path, "replaces"), "should not contain the name of the same descriptor (%q)", name)
		}
	}
	return r
}

func (p *parser) replaces(n *yaml.Node, path string) []string {
	if n.Kind != yaml.SequenceNode {
		p.fail(n, path, "want a list of {name: ...}")
		return nil
	}
	var out []string
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		var name string
		p.fields(e, ep, "name", func(_ string, v *yaml.Node) { name = p.text(v, join(ep, "name")) })
		if name == "" {
			p.fail(e, ep, "should not have an empty replaces entry")
			continue
		}
		out = append(out, name)
	}
	return out
}

// text reads a scalar as the reference does (a number is its text) and
// bounds it: at most MaxValueLen bytes of UTF-8 without control characters,
// what a request's descriptor value may be.
func (p *parser) text(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode {
		p.fail(n, path, "want a string")
		return ""
	}
	if n.Tag == "!!null" {
		return ""
	}
	if err := checkText(n.Value); err != nil {
		p.fail(n, path, "%v", err)
		return ""
	}
	return n.Value
}

// CheckText reports whether s may be a key or value: at most MaxValueLen
// bytes of UTF-8 without control characters.
func CheckText(s string) error { return checkText(s) }

func checkText(s string) error {
	if len(s) > MaxValueLen {
		return fmt.Errorf("%d bytes, at most %d", len(s), MaxValueLen)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return fmt.Errorf("control character %U", c)
		}
	}
	return nil
}

func (p *parser) bool(n *yaml.Node, path string) bool {
	if n.Kind != yaml.ScalarNode {
		p.fail(n, path, "want true or false")
		return false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		p.fail(n, path, "%q: want true or false", n.Value)
	}
	return b
}
