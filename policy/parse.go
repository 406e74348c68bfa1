package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	goyaml "github.com/goccy/go-yaml"
	goccy "github.com/goccy/go-yaml/parser"
	"go.yaml.in/yaml/v3"

	"github.com/quorate/quorate/policy/extract"
)

// MaxDocument bounds what Parse reads: 200,000 policies of a few hundred
// bytes each fit.
const MaxDocument = 64 << 20

// source remembers where a parsed policy's fields were written.
type source struct {
	file string
	// pos lists each written field's path ("" = the policy, "config.rate",
	// "key[0]") and line, column. A slice: a policy has a few dozen, and
	// 200k maps cost more than the scans.
	pos []fieldPos
}

type fieldPos struct {
	path      string
	line, col int
}

// at is the position of path, or of its nearest written ancestor.
func (s *source) at(path string) string {
	if s == nil {
		return ""
	}
	for {
		for _, p := range s.pos {
			if p.path == path {
				return fmt.Sprintf("%s:%d:%d: ", s.file, p.line, p.col)
			}
		}
		if path == "" {
			return s.file + ": "
		}
		path = parentPath(path)
	}
}

func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// Parse reads a YAML or JSON document (name is used in error positions): a
// {policies: [...]} mapping, a bare list of policies, or one policy. It
// returns every error it finds (up to 20), joined, each with its position.
// Parse checks each policy on its own; Validate checks the set.
func Parse(name string, data []byte) ([]Policy, error) {
	d, err := parse(name, data)
	return d.Policies, invalid(err)
}

// Document is a policy document: the policies and, if it has an
// `extraction:` section, how descriptors are read from HTTP requests.
type Document struct {
	Policies []Policy
	// Extraction is nil when the document has no extraction section.
	Extraction *extract.Extraction
}

// ParseDocument is Parse keeping the document's extraction section: a
// {policies: [...], extraction: {...}} mapping (either may be left out), a
// bare list of policies, or one policy.
func ParseDocument(name string, data []byte) (Document, error) {
	d, err := parse(name, data)
	return d, invalid(err)
}

func parse(name string, data []byte) (Document, error) {
	if len(data) > MaxDocument {
		return Document{}, fmt.Errorf("%s: %d bytes, at most %d", name, len(data), MaxDocument)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		if pos := syntaxPos(name, data); pos != nil {
			return Document{}, pos
		}
		return Document{}, syntaxErr(name, err)
	}
	p := &parser{file: name}
	d := p.document(&doc)
	for i := range d.Policies {
		if len(p.errs) >= maxErrors {
			break
		}
		p.errs = append(p.errs, checkFields(&d.Policies[i])...)
	}
	if len(p.errs) > 0 {
		return Document{}, joinErrs(p.errs)
	}
	return d, nil
}

// parserProblems are go-yaml's parser (not scanner) errors: it reports
// their line 0-based, and the scanner's 1-based.
var parserProblems = map[string]bool{
	"did not find expected ',' or ']'": true, "did not find expected ',' or '}'": true,
	"did not find expected '-' indicator": true, "did not find expected <document start>": true,
	"did not find expected <stream-start>": true, "did not find expected key": true,
	"did not find expected node content": true, "found duplicate %YAML directive": true,
	"found incompatible YAML document": true, "found undefined tag handle": true,
	"found duplicate %TAG directive": true,
}

// syntaxPos locates a syntax error with goccy/go-yaml's parser, which
// (unlike go.yaml.in's) gives the line and column of the token at fault.
// nil if it finds no error there: the two parsers disagree, and syntaxErr's
// line is the better answer.
func syntaxPos(name string, data []byte) error {
	_, err := goccy.ParseBytes(data, 0)
	var se *goyaml.SyntaxError
	if !errors.As(err, &se) || se.Token == nil || se.Token.Position == nil {
		return nil
	}
	return fmt.Errorf("%s:%d:%d: %s", name, se.Token.Position.Line, se.Token.Position.Column, se.Message)
}

// syntaxErr writes go-yaml's "yaml: line N: problem" as "name:N: problem",
// with N 1-based. go-yaml gives no column, and for parser errors the line is
// where the enclosing list or mapping starts.
func syntaxErr(name string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	rest, ok := strings.CutPrefix(msg, "line ")
	num, problem, ok2 := strings.Cut(rest, ": ")
	line, err2 := strconv.Atoi(num)
	if !ok || !ok2 || err2 != nil {
		return fmt.Errorf("%s: %s", name, msg)
	}
	if parserProblems[problem] {
		line++
	}
	return fmt.Errorf("%s:%d: %s", name, line, problem)
}

func joinErrs(errs []error) error {
	if len(errs) > maxErrors {
		errs = append(errs[:maxErrors:maxErrors], fmt.Errorf("(more errors not shown)"))
	}
	return errors.Join(errs...)
}

type parser struct {
	file string
	errs []error
	src  *source // the policy being read
	id   string
}

func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	if len(p.errs) > maxErrors {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	if p.id != "" {
		msg = "policy " + p.id + ": " + msg
	}
	p.errs = append(p.errs, fmt.Errorf("%s:%d:%d: %s", p.file, n.Line, n.Column, msg))
}

// ok refuses aliases: following them could expand a small document
// exponentially, and policies have no use for them.
func (p *parser) ok(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		p.fail(n, path, "aliases are not supported")
		return false
	}
	if p.src != nil {
		p.src.pos = append(p.src.pos, fieldPos{path, n.Line, n.Column})
	}
	return true
}

func (p *parser) document(doc *yaml.Node) Document {
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: empty document (write policies: [] for an empty set)", p.file))
		return Document{}
	}
	root := doc.Content[0]
	if !p.ok(root, "") {
		return Document{}
	}
	switch root.Kind {
	case yaml.SequenceNode:
		return Document{Policies: p.list(root)}
	case yaml.MappingNode:
		if lookup(root, "policies") == nil && lookup(root, "extraction") == nil {
			return Document{Policies: []Policy{p.policy(root)}}
		}
		d := Document{Policies: []Policy{}}
		p.fields(root, "", func(k string, v *yaml.Node, path string) {
			switch k {
			case "policies":
				if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
					return
				}
				if v.Kind != yaml.SequenceNode {
					p.fail(v, "policies", "want a list of policies")
					return
				}
				d.Policies = p.list(v)
			case "extraction":
				d.Extraction = p.extraction(v, path)
			default:
				p.fail(v, path, "unknown top-level field of a document with policies: or extraction: (known: policies, extraction)")
			}
		})
		return d
	}
	p.fail(root, "", "want a list of policies, {policies: [...]} or one policy")
	return Document{}
}

// extraction reads an extraction section; its values are checked as
// extract.Compile checks them, each error at its field's position.
func (p *parser) extraction(v *yaml.Node, path string) *extract.Extraction {
	e := &extract.Extraction{}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return e
	}
	at := map[string]*yaml.Node{"": v}
	strMap := func(v *yaml.Node, path string) map[string]string {
		m := map[string]string{}
		p.fields(v, path, func(k string, v *yaml.Node, sub string) {
			at[strings.TrimPrefix(sub, "extraction.")] = v
			m[k] = p.str(v, sub)
		})
		return m
	}
	list := func(v *yaml.Node, path string) []string {
		at[strings.TrimPrefix(path, "extraction.")] = v
		out := p.strs(v, path)
		for i := range v.Content {
			at[fmt.Sprintf("%s[%d]", strings.TrimPrefix(path, "extraction."), i)] = v.Content[i]
		}
		return out
	}
	p.fields(v, path, func(k string, v *yaml.Node, sub string) {
		at[k] = v
		switch k {
		case "headers":
			e.Headers = strMap(v, sub)
		case "custom":
			e.Custom = strMap(v, sub)
		case "trusted_proxies":
			e.TrustedProxies = list(v, sub)
		case "client_ip_headers":
			e.ClientIPHeaders = list(v, sub)
		default:
			p.fail(v, sub, "unknown field (known: headers, custom, trusted_proxies, client_ip_headers)")
		}
	})
	for _, pr := range extract.Problems(e) {
		sub := pr.Path
		n := at[sub]
		for n == nil {
			sub = parentPath(sub)
			n = at[sub]
		}
		p.fail(n, "extraction."+sub, "%s", pr.Msg)
	}
	return e
}

func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func (p *parser) list(seq *yaml.Node) []Policy {
	ps := make([]Policy, 0, len(seq.Content))
	for _, n := range seq.Content {
		if len(p.errs) > maxErrors {
			break
		}
		if !p.ok(n, "") {
			continue
		}
		ps = append(ps, p.policy(n))
	}
	return ps
}

// fields calls f for each key of mapping m, refusing duplicates and non-scalar keys.
func (p *parser) fields(m *yaml.Node, path string, f func(key string, v *yaml.Node, path string)) {
	if m.Kind != yaml.MappingNode {
		p.fail(m, path, "want a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.fail(k, path, "field names must be strings")
			continue
		}
		sub := k.Value
		if path != "" {
			sub = path + "." + k.Value
		}
		if seen[k.Value] {
			p.fail(k, sub, "written twice")
			continue
		}
		seen[k.Value] = true
		if p.ok(v, sub) {
			f(k.Value, v, sub)
		}
	}
}

func (p *parser) policy(n *yaml.Node) Policy {
	pol := Policy{src: &source{file: p.file, pos: []fieldPos{{"", n.Line, n.Column}}}}
	p.src, p.id = pol.src, ""
	defer func() { p.src, p.id = nil, "" }()
	if n.Kind != yaml.MappingNode {
		p.fail(n, "", "a policy must be a mapping")
		return pol
	}
	if v := lookup(n, "policy_id"); v != nil && v.Kind == yaml.ScalarNode {
		p.id = strconv.Quote(v.Value)
		if validName(v.Value, MaxNameLen) {
			p.id = v.Value
		}
	}
	p.fields(n, "", func(k string, v *yaml.Node, path string) { p.policyField(&pol, k, v, path) })
	return pol
}

func (p *parser) policyField(pol *Policy, k string, v *yaml.Node, path string) {
	switch k {
	case "policy_id":
		pol.ID = p.str(v, path)
	case "description":
		pol.Description = p.str(v, path)
	case "layer":
		p.enum(v, path, layerNames, (*uint8)(&pol.Layer))
	case "kind":
		p.enum(v, path, kindNames, (*uint8)(&pol.Kind))
	case "extends":
		pol.Extends = p.str(v, path)
	case "scope":
		pol.Scope = p.scope(v, path)
	case "key":
		pol.Key = p.strs(v, path)
	case "shared":
		pol.Shared = p.bool(v, path)
	case "algorithm":
		pol.Algorithm = strings.ToUpper(p.str(v, path))
	case "config":
		pol.Config = p.config(v, path)
	case "limits":
		pol.Limits = p.limits(v, path)
	case "quota_tree":
		pol.QuotaTree = p.levels(v, path)
	case "mode":
		p.enum(v, path, modeNames, (*uint8)(&pol.Mode))
	case "consistency":
		p.enum(v, path, consistencyNames, (*uint8)(&pol.Consistency))
	case "fail_behavior":
		p.enum(v, path, failNames, (*uint8)(&pol.FailBehavior))
	case "emergency_cap":
		pol.EmergencyCap = p.str(v, path)
	case "priority":
		pol.Priority = int(p.int(v, path, -1_000_000_000, 1_000_000_000))
	case "enabled":
		b := p.bool(v, path)
		pol.Enabled = &b
	case "updated_at":
		p.str(v, path) // set by the server: accepted so `policy get` output re-applies
	case "risk":
		pol.Risk = p.risk(v, path)
	case "idempotency":
		pol.Idempotency = p.idempotency(v, path)
	case "rollout":
		pol.Rollout = p.rollout(v, path)
	case "throttle":
		pol.Throttle = p.throttle(v, path)
	default:
		p.fail(v, path, "unknown field (known: policy_id, description, layer, kind, extends, scope, key, shared, algorithm, config, limits, quota_tree, mode, consistency, fail_behavior, emergency_cap, priority, enabled, updated_at, risk, idempotency, rollout, throttle)")
	}
}

func (p *parser) str(v *yaml.Node, path string) string {
	if v.Kind != yaml.ScalarNode {
		p.fail(v, path, "want a string")
		return ""
	}
	if v.Tag == "!!null" {
		return ""
	}
	return v.Value
}

// strs reads a list of strings (or one string). An empty list is nil, as
// unset: the canonical form omits both, so they must mean the same.
func (p *parser) strs(v *yaml.Node, path string) []string {
	if v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
		return []string{v.Value}
	}
	if v.Kind == yaml.ScalarNode {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, "want a list of strings")
		return nil
	}
	var out []string
	for i, e := range v.Content {
		sub := fmt.Sprintf("%s[%d]", path, i)
		if p.ok(e, sub) {
			out = append(out, p.str(e, sub))
		}
	}
	return out
}

func (p *parser) int(v *yaml.Node, path string, lo, hi int64) int64 {
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if v.Kind != yaml.ScalarNode || err != nil {
		p.fail(v, path, "%q: want a whole number", v.Value)
		return 0
	}
	if n < lo || n > hi {
		p.fail(v, path, "%d: want a number in [%d, %d]", n, lo, hi)
	}
	return n
}

func (p *parser) float(v *yaml.Node, path string) float64 {
	f, err := strconv.ParseFloat(v.Value, 64)
	if v.Kind != yaml.ScalarNode || err != nil {
		p.fail(v, path, "%q: want a number", v.Value)
	}
	return f
}

func (p *parser) bool(v *yaml.Node, path string) bool {
	b, err := strconv.ParseBool(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil {
		p.fail(v, path, "%q: want true or false", v.Value)
	}
	return b
}

func (p *parser) enum(v *yaml.Node, path string, names []string, dst *uint8) {
	e, err := enumParse(names, p.str(v, path), path)
	if err != nil {
		p.fail(v, path, "%v", err)
	}
	*dst = e
}

func (p *parser) scope(v *yaml.Node, path string) Scope {
	var s Scope // empty is nil, like strs
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		if v.Kind == yaml.SequenceNode {
			pats := Patterns(p.strs(v, path))
			if len(pats) == 0 {
				p.fail(v, path, "an empty list matches nothing (use \"\" for absent, \"*\" for any value)")
			}
			if s == nil {
				s = Scope{}
			}
			s[k] = pats
			return
		}
		if s == nil {
			s = Scope{}
		}
		s[k] = Patterns{p.str(v, path)}
	})
	return s
}

func (p *parser) config(v *yaml.Node, path string) *Config {
	c := &Config{}
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		if !p.configField(c, k, v, path) {
			p.fail(v, path, "unknown config field (known: rate, limit, period, refill_per_sec, capacity, burst)")
		}
	})
	return c
}

// configField reads one field of a config into c; false if k is none.
func (p *parser) configField(c *Config, k string, v *yaml.Node, path string) bool {
	switch k {
	case "rate":
		c.Rate = p.str(v, path)
	case "limit":
		c.Limit = Amount(p.str(v, path))
	case "period":
		c.Period = p.str(v, path)
	case "refill_per_sec":
		c.RefillPerSec = p.float(v, path)
	case "capacity":
		c.Capacity = p.int(v, path, -1<<62, 1<<62)
	case "burst":
		c.Burst = p.int(v, path, -1<<62, 1<<62)
	default:
		return false
	}
	return true
}

func (p *parser) seq(v *yaml.Node, path string, each func(e *yaml.Node, path string)) {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, "want a list")
		return
	}
	for i, e := range v.Content {
		sub := fmt.Sprintf("%s[%d]", path, i)
		if p.ok(e, sub) {
			each(e, sub)
		}
	}
}

func (p *parser) limits(v *yaml.Node, path string) []NamedLimit {
	var out []NamedLimit
	p.seq(v, path, func(e *yaml.Node, path string) {
		var l NamedLimit
		p.fields(e, path, func(k string, v *yaml.Node, path string) {
			if k == "name" {
				l.Name = p.str(v, path)
			} else if !p.limitField(k, v, path, &l.Key, &l.Algorithm, &l.Config) {
				p.fail(v, path, "unknown field (known: name, key, algorithm, config)")
			}
		})
		out = append(out, l)
	})
	return out
}

// levels reads a quota tree, with its shorthand: a level's config may be
// written on the level itself ({level: TENANT, limit: 50000/min}).
func (p *parser) levels(v *yaml.Node, path string) []QuotaLevel {
	var out []QuotaLevel
	p.seq(v, path, func(e *yaml.Node, path string) {
		var l QuotaLevel
		inline := &Config{}
		var at *yaml.Node
		p.fields(e, path, func(k string, v *yaml.Node, sub string) {
			switch {
			case k == "level":
				l.Level = p.str(v, sub)
			case p.limitField(k, v, sub, &l.Key, &l.Algorithm, &l.Config):
			case p.configField(inline, k, v, sub):
				if at == nil {
					at = v
				}
				if p.src != nil { // errors in the config point at the level's own fields
					p.src.pos = append(p.src.pos, fieldPos{path + ".config", v.Line, v.Column}, fieldPos{path + ".config." + k, v.Line, v.Column})
				}
			default:
				p.fail(v, sub, "unknown field (known: level, key, algorithm, config, and config's rate, limit, period, refill_per_sec, capacity, burst)")
			}
		})
		switch {
		case at != nil && l.Config != nil:
			p.fail(at, path, "write the limit once: on the level (limit: 1000/min) or in config:, not both")
		case at != nil:
			l.Config = inline
		}
		out = append(out, l)
	})
	expandLevels(out)
	return out
}

// levelKeys are the keys level names imply. USER and ROUTE add their
// descriptor to the previous level's key: a route's quota is per tenant
// and key when it sits under them.
var levelKeys = map[string][]string{
	"TENANT": {"tenant_id"}, "API_KEY": {"tenant_id", "api_key_id"}, "USER": {"user_id"},
	"ROUTE": {"route"}, "IP": {"ip"},
}

// expandLevels writes into the tree what its shorthand implies, so the
// stored policy says it: a level named TENANT, API_KEY, USER, ROUTE or IP
// without a key counts by the key its name implies, and a first level
// without an algorithm is a SLIDING_WINDOW.
func expandLevels(ls []QuotaLevel) {
	var prev []string
	for i := range ls {
		l := &ls[i]
		name := strings.ToUpper(l.Level)
		if k, ok := levelKeys[name]; ok && len(l.Key) == 0 {
			if (name == "USER" || name == "ROUTE") && !slices.Contains(prev, k[0]) {
				k = append(slices.Clone(prev), k[0])
			} else if name == "USER" || name == "ROUTE" {
				k = prev
			}
			l.Key = slices.Clone(k)
		}
		if i == 0 && l.Algorithm == "" {
			l.Algorithm = "SLIDING_WINDOW"
		}
		prev = l.Key
	}
}

// limitField reads a field that named limits and quota levels share; false
// if k is none of them.
func (p *parser) limitField(k string, v *yaml.Node, path string, key *[]string, alg *string, cfg **Config) bool {
	switch k {
	case "key":
		*key = p.strs(v, path)
	case "algorithm":
		*alg = strings.ToUpper(p.str(v, path))
	case "config":
		*cfg = p.config(v, path)
	default:
		return false
	}
	return true
}

func (p *parser) risk(v *yaml.Node, path string) *Risk {
	if v.Kind == yaml.ScalarNode {
		if v.Value != "default" {
			p.fail(v, path, "%q: want default or a mapping with bands, floor, exempt", v.Value)
		}
		return DefaultRisk()
	}
	r := &Risk{}
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		switch k {
		case "bands":
			p.seq(v, path, func(e *yaml.Node, path string) { r.Bands = append(r.Bands, p.band(e, path)) })
		case "floor":
			r.Floor = p.int(v, path, -1<<62, 1<<62)
		case "exempt":
			r.Exempt = p.strs(v, path)
		case "max_cut":
			r.MaxCut = p.float(v, path)
		case "memory":
			r.Memory = p.riskMemory(v, path)
		default:
			p.fail(v, path, "unknown field (known: bands, floor, exempt, max_cut, memory)")
		}
	})
	return r
}

func (p *parser) band(v *yaml.Node, path string) Band {
	var b Band
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		switch k {
		case "min":
			b.Min = p.float(v, path)
		case "above":
			a := p.float(v, path)
			b.Above = &a
		case "cut":
			b.Cut = p.float(v, path)
		case "action":
			b.Action = strings.ToUpper(p.str(v, path))
		default:
			p.fail(v, path, "unknown field (known: min, above, cut, action)")
		}
	})
	return b
}

func (p *parser) riskMemory(v *yaml.Node, path string) *RiskMemory {
	m := &RiskMemory{}
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		switch k {
		case "half_life":
			m.HalfLife = p.str(v, path)
		case "by":
			m.By = p.strs(v, path)
		default:
			p.fail(v, path, "unknown field (known: half_life, by)")
		}
	})
	return m
}

func (p *parser) rollout(v *yaml.Node, path string) *Rollout {
	r := &Rollout{}
	seen := false
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		switch k {
		case "percent":
			r.Percent, seen = p.float(v, path), true
		case "by":
			r.By = p.strs(v, path)
		default:
			p.fail(v, path, "unknown field (known: percent, by)")
		}
	})
	if !seen {
		p.fail(v, path+".percent", "missing: the share of subjects enforced, 0 to 100")
	}
	return r
}

func (p *parser) idempotency(v *yaml.Node, path string) *Idempotency {
	id := &Idempotency{}
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		if k != "mode" {
			p.fail(v, path, "unknown field (known: mode)")
			return
		}
		id.Mode = p.str(v, path)
	})
	return id
}

func (p *parser) throttle(v *yaml.Node, path string) *ThrottleConfig {
	t := &ThrottleConfig{}
	p.fields(v, path, func(k string, v *yaml.Node, path string) {
		switch k {
		case "max_delay":
			t.MaxDelay = p.str(v, path)
		case "friction":
			t.Friction = p.str(v, path)
		default:
			p.fail(v, path, "unknown field (known: max_delay, friction)")
		}
	})
	return t
}
