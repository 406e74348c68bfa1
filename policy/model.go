package policy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Mode says what a policy's denial does. The zero value is unset: Hard.
type Mode uint8

// The modes.
const (
	// Hard denies.
	Hard Mode = iota + 1
	// Soft allows and reports OVER_LIMIT_SOFT, so the caller can warn or degrade.
	Soft
	// Shadow decides and counts but never denies: how a new limit is tried.
	Shadow
	// Throttle delays instead of denying: over the rate a request is
	// answered THROTTLE with the wait that spaces it to the rate, up to
	// throttle.max_delay; beyond that it is denied.
	Throttle
)

// Consistency says where a policy's checks are decided. The zero value is unset: Strict.
type Consistency uint8

// The consistencies.
const (
	// Strict checks are decided in the shard's Raft group, exactly.
	Strict Consistency = iota + 1
	// Leased checks are decided from node-local budget, never over the limit.
	Leased
)

// FailBehavior says what a check does while its shard cannot decide. The zero value is unset: FailOpen.
type FailBehavior uint8

// The fail behaviors.
const (
	// FailOpen allows (within the emergency cap, if the policy has one).
	FailOpen FailBehavior = iota + 1
	// FailClosed denies.
	FailClosed
)

// Layer is the dimension a policy limits. Every selected policy of every layer
// applies; within a layer one policy is selected. The zero value is unset:
// inferred from the key.
type Layer uint8

// The layers, in the order Resolution.Applied lists them.
const (
	Global Layer = iota + 1
	Tenant
	APIKey
	User
	Route
	IP
	Custom
	numLayers
)

// Kind orders policies within a layer: a lower Kind wins. The zero value is
// unset: inferred from the scope.
type Kind uint8

// The kinds, most specific first.
const (
	// KindBlock always denies. (Block is the emergency block type, so the
	// kind carries its type's name.)
	KindBlock Kind = iota + 1
	Override
	Plan
	RouteAdjustment
	Fallback
	Default
	numKinds
)

var (
	modeNames        = []string{"", "HARD", "SOFT", "SHADOW", "THROTTLE"}
	consistencyNames = []string{"", "STRICT", "LEASED"}
	failNames        = []string{"", "FAIL_OPEN", "FAIL_CLOSED"}
	layerNames       = []string{"", "GLOBAL", "TENANT", "API_KEY", "USER", "ROUTE", "IP", "CUSTOM"}
	kindNames        = []string{"", "BLOCK", "OVERRIDE", "PLAN", "ROUTE", "FALLBACK", "DEFAULT"}
)

func enumString(names []string, v uint8) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%d", v)
}

// enumParse is case-insensitive: people write "hard" and "HARD".
func enumParse(names []string, s, what string) (uint8, error) {
	for i, n := range names[1:] {
		if strings.EqualFold(n, s) {
			return uint8(i + 1), nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q (use %s)", what, s, strings.Join(names[1:], ", "))
}

func (m Mode) String() string         { return enumString(modeNames, uint8(m)) }
func (c Consistency) String() string  { return enumString(consistencyNames, uint8(c)) }
func (f FailBehavior) String() string { return enumString(failNames, uint8(f)) }
func (l Layer) String() string        { return enumString(layerNames, uint8(l)) }
func (k Kind) String() string         { return enumString(kindNames, uint8(k)) }

// MarshalText writes the name the file format uses.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// MarshalText writes the name the file format uses.
func (c Consistency) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// MarshalText writes the name the file format uses.
func (f FailBehavior) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// MarshalText writes the name the file format uses.
func (l Layer) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// MarshalText writes the name the file format uses.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a name, case-insensitively.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := enumParse(modeNames, string(b), "mode")
	*m = Mode(v)
	return err
}

// UnmarshalText reads a name, case-insensitively.
func (c *Consistency) UnmarshalText(b []byte) error {
	v, err := enumParse(consistencyNames, string(b), "consistency")
	*c = Consistency(v)
	return err
}

// UnmarshalText reads a name, case-insensitively.
func (f *FailBehavior) UnmarshalText(b []byte) error {
	v, err := enumParse(failNames, string(b), "fail_behavior")
	*f = FailBehavior(v)
	return err
}

// UnmarshalText reads a name, case-insensitively.
func (l *Layer) UnmarshalText(b []byte) error {
	v, err := enumParse(layerNames, string(b), "layer")
	*l = Layer(v)
	return err
}

// UnmarshalText reads a name, case-insensitively.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := enumParse(kindNames, string(b), "kind")
	*k = Kind(v)
	return err
}

// Policy is one policy as written (the model). JSON and YAML tags are the
// file's field names; it marshals back to the canonical form (unset fields
// omitted) for `policy get` and `policy list`. Parse fills it; Validate and
// Compile apply extends and the defaults without changing it.
type Policy struct {
	ID           string          `json:"policy_id" yaml:"policy_id"`
	Description  string          `json:"description,omitempty" yaml:"description,omitempty"`
	Layer        Layer           `json:"layer,omitempty" yaml:"layer,omitempty"`
	Kind         Kind            `json:"kind,omitempty" yaml:"kind,omitempty"`
	Extends      string          `json:"extends,omitempty" yaml:"extends,omitempty"`
	Scope        Scope           `json:"scope,omitempty" yaml:"scope,omitempty"`
	Key          []string        `json:"key,omitempty" yaml:"key,omitempty"`
	Shared       bool            `json:"shared,omitempty" yaml:"shared,omitempty"` // no key on purpose: one bucket for a class of subjects
	Algorithm    string          `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	Config       *Config         `json:"config,omitempty" yaml:"config,omitempty"`
	Limits       []NamedLimit    `json:"limits,omitempty" yaml:"limits,omitempty"`
	QuotaTree    []QuotaLevel    `json:"quota_tree,omitempty" yaml:"quota_tree,omitempty"`
	Mode         Mode            `json:"mode,omitempty" yaml:"mode,omitempty"`
	Consistency  Consistency     `json:"consistency,omitempty" yaml:"consistency,omitempty"`
	FailBehavior FailBehavior    `json:"fail_behavior,omitempty" yaml:"fail_behavior,omitempty"`
	EmergencyCap string          `json:"emergency_cap,omitempty" yaml:"emergency_cap,omitempty"`
	Priority     int             `json:"priority,omitempty" yaml:"priority,omitempty"`
	Enabled      *bool           `json:"enabled,omitempty" yaml:"enabled,omitempty"`
	UpdatedAt    time.Time       `json:"updated_at,omitzero" yaml:"updated_at,omitempty"`
	Risk         *Risk           `json:"risk,omitempty" yaml:"risk,omitempty"`
	Idempotency  *Idempotency    `json:"idempotency,omitempty" yaml:"idempotency,omitempty"`
	Rollout      *Rollout        `json:"rollout,omitempty" yaml:"rollout,omitempty"`
	Throttle     *ThrottleConfig `json:"throttle,omitempty" yaml:"throttle,omitempty"`

	// src holds where each field was written, for error positions; nil for
	// policies built in Go.
	src *source
}

// IsEnabled reports whether p takes part in resolution (enabled unset means true).
func (p *Policy) IsEnabled() bool { return p.Enabled == nil || *p.Enabled }

// Scope maps a descriptor name to the patterns that match it.
type Scope map[string]Patterns

// Patterns match a descriptor if any one does: "x" exact, "*" present, "p*"
// prefix, an IP or CIDR for ip, and "" absent. It marshals as a string when
// it holds one pattern.
type Patterns []string

// MarshalJSON writes one pattern as a string, several as a list.
func (p Patterns) MarshalJSON() ([]byte, error) {
	if len(p) == 1 {
		return json.Marshal(p[0])
	}
	return json.Marshal([]string(p))
}

// MarshalYAML writes one pattern as a string, several as a list.
func (p Patterns) MarshalYAML() (any, error) {
	if len(p) == 1 {
		return p[0], nil
	}
	return []string(p), nil
}

// UnmarshalJSON reads a string, a list of strings, or null (absent).
func (p *Patterns) UnmarshalJSON(b []byte) error {
	var s *string
	if err := json.Unmarshal(b, &s); err == nil {
		if s == nil {
			*p = Patterns{""}
		} else {
			*p = Patterns{*s}
		}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(p))
}

// Config is one limit's parameters in the units people write: a rate or
// limit ("60/min", "10/5s", or a count with Period), or RefillPerSec, and
// optionally Capacity (or its synonym Burst).
type Config struct {
	Rate         string  `json:"rate,omitempty" yaml:"rate,omitempty"`
	Limit        Amount  `json:"limit,omitempty" yaml:"limit,omitempty"`
	Period       string  `json:"period,omitempty" yaml:"period,omitempty"`
	RefillPerSec float64 `json:"refill_per_sec,omitempty" yaml:"refill_per_sec,omitempty"`
	Capacity     int64   `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	Burst        int64   `json:"burst,omitempty" yaml:"burst,omitempty"`
}

// Amount is a rate ("60/min") or a bare count; a count marshals as a number.
type Amount string

// MarshalJSON writes a bare count as a number.
func (a Amount) MarshalJSON() ([]byte, error) {
	if isDigits(string(a)) {
		return []byte(a), nil
	}
	return json.Marshal(string(a))
}

// MarshalYAML writes a bare count as a number.
func (a Amount) MarshalYAML() (any, error) {
	if isDigits(string(a)) {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: string(a)}, nil
	}
	return string(a), nil
}

// UnmarshalJSON reads a string or a number.
func (a *Amount) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*a = Amount(n)
		return nil
	}
	return json.Unmarshal(b, (*string)(a))
}

// NamedLimit is one of several limits that must all allow (burst + sustained).
type NamedLimit struct {
	Name      string   `json:"name" yaml:"name"`
	Key       []string `json:"key,omitempty" yaml:"key,omitempty"`
	Algorithm string   `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	Config    *Config  `json:"config,omitempty" yaml:"config,omitempty"`
}

// QuotaLevel is one level of a quota tree: a request consumes at every level or at none.
type QuotaLevel struct {
	Level     string   `json:"level" yaml:"level"`
	Key       []string `json:"key,omitempty" yaml:"key,omitempty"`
	Algorithm string   `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	Config    *Config  `json:"config,omitempty" yaml:"config,omitempty"`
}

// Risk cuts a policy's limits by the request's risk score.
type Risk struct {
	Bands  []Band   `json:"bands,omitempty" yaml:"bands,omitempty"`
	Floor  int64    `json:"floor,omitempty" yaml:"floor,omitempty"`
	Exempt []string `json:"exempt,omitempty" yaml:"exempt,omitempty"`
	// MaxCut bounds every band's cut (0: no bound beyond the band's own).
	MaxCut float64 `json:"max_cut,omitempty" yaml:"max_cut,omitempty"`
	// Memory remembers a subject's score, decaying, so that a request
	// without a score, or with a lower one, still gets the cut a recent
	// high score earned.
	Memory *RiskMemory `json:"memory,omitempty" yaml:"memory,omitempty"`
}

// Band cuts the limit by Cut (a fraction) for scores at or above Min, or,
// when Above is set, for scores strictly above it; with Action THROTTLE the
// policy also throttles those requests instead of denying them.
type Band struct {
	Min    float64  `json:"min,omitempty" yaml:"min,omitempty"`
	Above  *float64 `json:"above,omitempty" yaml:"above,omitempty"`
	Cut    float64  `json:"cut" yaml:"cut"`
	Action string   `json:"action,omitempty" yaml:"action,omitempty"` // "" or CUT: cut only; THROTTLE
}

// ThrottleConfig says how long a policy may hold a request instead of denying it
// (mode THROTTLE, a risk band's action THROTTLE), or, for a SOFT policy,
// the friction each unit over the limit adds. Durations are Go's ("2s").
type ThrottleConfig struct {
	MaxDelay string `json:"max_delay,omitempty" yaml:"max_delay,omitempty"`
	Friction string `json:"friction,omitempty" yaml:"friction,omitempty"`
}

// RiskMemory is how long a score is remembered and for whom.
type RiskMemory struct {
	// HalfLife: a remembered score halves every HalfLife (a duration:
	// 10m, 1h).
	HalfLife string `json:"half_life" yaml:"half_life"`
	// By names the descriptors that make a subject; empty means the
	// policy's key.
	By []string `json:"by,omitempty" yaml:"by,omitempty"`
}

// DefaultRisk is what `risk: default` means, the bands of the guide:
// above 0.9 cut by 80%, from 0.7 to 0.9 by 40%, never below 1.
func DefaultRisk() *Risk {
	above := 0.9
	return &Risk{Bands: []Band{{Above: &above, Cut: 0.8}, {Min: 0.7, Cut: 0.4}}, Floor: 1}
}

// Rollout enforces a policy for a share of its subjects only; for the
// others it is a shadow (decided and counted, never denying). Subjects are
// chosen by a hash of the policy id and the By descriptors' values, so
// every node picks the same ones, before and after a restart, and raising
// Percent keeps every subject already enforced. It is not inherited
// through extends.
type Rollout struct {
	// Percent of subjects enforced, from 0 to 100 (up to 4 decimals).
	Percent float64 `json:"percent" yaml:"percent"`
	// By names the descriptors that make a subject; empty means the
	// policy's key. A request without one of them is not enforced.
	By []string `json:"by,omitempty" yaml:"by,omitempty"`
}

// Idempotency says whether a retry is charged again.
type Idempotency struct {
	// Mode is "charge" (every attempt counts; the default) or "dedupe".
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
}

// Block is an emergency block: deny every request matching Scope until ExpiresAt.
type Block struct {
	ID        string            `json:"block_id"`
	Scope     map[string]string `json:"scope"` // descriptor -> matcher string, same syntax as policy scope
	ExpiresAt time.Time         `json:"expires_at"`
	Reason    string            `json:"reason,omitempty"`
	CreatedBy string            `json:"created_by,omitempty"`
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func itoa(n int) string { return strconv.Itoa(n) }
