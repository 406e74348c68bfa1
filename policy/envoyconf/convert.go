package envoyconf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/quorate/quorate/policy"
)

// The custom descriptors an Envoy request is checked with: the node its
// descriptor names (the policy id) and its entries, what the node counts by.
const (
	NodeDescriptor = "envoy.node"
	KeyDescriptor  = "envoy.key"
	// DescriptionPrefix starts the description of every imported policy;
	// the rest is its Spec in JSON.
	DescriptionPrefix = "envoy:"
)

// Spec is one configuration node as an imported policy carries it: enough
// to rebuild the tree (Index) and to answer in Envoy's terms.
type Spec struct {
	Domain          string   `json:"domain"`
	Path            []Step   `json:"path"`
	Name            string   `json:"name,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
	Unit            Unit     `json:"unit,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	// NoLimit marks a leaf written without rate_limit: a match ending
	// there applies no limit.
	NoLimit bool `json:"no_limit,omitempty"`
	Shadow  bool `json:"shadow_mode,omitempty"`
}

// Step is one level of a node's path: its key, its value ("" when written
// without one; may hold '*' wildcards) and its place among its siblings in
// the file, which orders wildcard matches.
type Step struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
	Order int    `json:"order"`
}

// Limited reports whether the node has a limit to count against.
func (s *Spec) Limited() bool { return !s.Unlimited && !s.NoLimit }

// Options choose how imported limits are decided.
type Options struct {
	// Algorithm is the quorate algorithm of every imported limit; ""
	// means FIXED_WINDOW, which decides as the reference does.
	Algorithm string
}

// Policies turns cfg into quorate policies, one per deciding node (see the
// package doc), sorted by the file's order. The set is checked with
// policy.Compile, so an error names the policy and field.
func Policies(cfg *Config, opt Options) ([]policy.Policy, error) {
	alg := opt.Algorithm
	if alg == "" {
		alg = "FIXED_WINDOW"
	}
	var out []policy.Policy
	for _, d := range cfg.Domains {
		var walk func(ds []*Descriptor, path []Step) error
		walk = func(ds []*Descriptor, path []Step) error {
			for i, n := range ds {
				p := append(path[:len(path):len(path)], Step{Key: n.Key, Value: n.Value, Order: i})
				if n.RateLimit != nil || len(n.Descriptors) == 0 {
					pol, err := nodePolicy(d.Name, p, n, alg)
					if err != nil {
						return err
					}
					out = append(out, pol)
				}
				if err := walk(n.Descriptors, p); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(d.Descriptors, nil); err != nil {
			return nil, err
		}
	}
	if _, err := policy.Compile(out, nil, 0); err != nil {
		return nil, fmt.Errorf("envoyconf: %w", err)
	}
	return out, nil
}

func nodePolicy(domain string, path []Step, n *Descriptor, alg string) (policy.Policy, error) {
	s := Spec{Domain: domain, Path: path, Shadow: n.ShadowMode}
	switch rl := n.RateLimit; {
	case rl == nil:
		s.NoLimit = true
	default:
		s.Name, s.Replaces, s.Unlimited = rl.Name, rl.Replaces, rl.Unlimited
		s.Unit, s.RequestsPerUnit = rl.Unit, rl.RequestsPerUnit
	}
	desc, err := json.Marshal(&s)
	if err != nil {
		return policy.Policy{}, err
	}
	id := PolicyID(domain, path)
	p := policy.Policy{
		ID:          id,
		Description: DescriptionPrefix + string(desc),
		Layer:       policy.Custom,
		Scope:       policy.Scope{"custom." + NodeDescriptor: {id}},
	}
	off := false
	switch {
	case !s.Limited(), s.RequestsPerUnit == 0 && s.Shadow:
		// A marker: it keeps the node in the tree and decides nothing. A
		// shadow limit of 0 is answered by the front end (never denies).
		p.Kind, p.Enabled = policy.KindBlock, &off
	case s.RequestsPerUnit == 0:
		// Every request is over a limit of 0: a BLOCK policy denies without
		// counting.
		p.Kind = policy.KindBlock
	default:
		p.Kind = policy.Override
		p.Key = []string{"custom." + KeyDescriptor}
		p.Algorithm = alg
		p.Config = &policy.Config{Limit: policy.Amount(fmt.Sprintf("%d/%s", s.RequestsPerUnit, rateUnit(s.Unit)))}
		if s.Shadow {
			p.Mode = policy.Shadow
		}
	}
	return p, nil
}

// rateUnit writes a unit in quorate's rate syntax.
func rateUnit(u Unit) string {
	switch u {
	case "SECOND":
		return "s"
	case "MINUTE":
		return "min"
	case "HOUR":
		return "h"
	case "DAY":
		return "d"
	}
	return fmt.Sprintf("%dh", u.Seconds()/3600)
}

// PolicyID names a node's policy: readable (the domain) and unique (a
// digest of the domain and the path), the same at every import so that a
// changed limit keeps its counts.
func PolicyID(domain string, path []Step) string {
	h := sha256.New()
	h.Write([]byte(domain))
	for _, s := range path {
		h.Write([]byte{0})
		h.Write([]byte(s.Key))
		h.Write([]byte{0})
		h.Write([]byte(s.Value))
	}
	return "envoy." + slug(domain, 48) + "." + hex.EncodeToString(h.Sum(nil)[:8])
}

// slug keeps [a-z0-9_-] of s (lowered), others as '-', at most n bytes.
func slug(s string, n int) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		if b.Len() >= n {
			break
		}
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// SpecOf reads the node an imported policy carries; ok is false for a
// policy that is not an imported one.
func SpecOf(p *policy.Policy) (*Spec, bool) {
	rest, ok := strings.CutPrefix(p.Description, DescriptionPrefix)
	if !ok {
		return nil, false
	}
	var s Spec
	if err := json.Unmarshal([]byte(rest), &s); err != nil || s.Domain == "" || len(s.Path) == 0 || len(s.Path) > MaxDepth {
		return nil, false
	}
	return &s, true
}

// Entry is one entry of a request's descriptor.
type Entry struct{ Key, Value string }

// Key is what a request's descriptor counts by: its entries, escaped so
// that different entries never give the same key, or their SHA-256 when
// that is longer than a descriptor value may be.
func Key(entries []Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('&')
		}
		escape(&b, e.Key)
		b.WriteByte('=')
		escape(&b, e.Value)
	}
	if b.Len() <= MaxValueLen {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '&', '=':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}
