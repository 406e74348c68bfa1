package decisionlog

import "time"

// Record is one decision as the caller knows it. The JSON tags are the
// line's names, so a consumer decodes a line with encoding/json into a
// Record; AppendJSON writes the same object faster.
//
// Log copies the Record, but not what its Policies slice and Custom map
// point to: the writer reads those later, so the caller must not change
// them after Log.
type Record struct {
	// Time is when the check was decided; zero means when Log was called.
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id,omitempty"`
	TraceID   string    `json:"trace_id,omitempty"` // hex
	// Node is the deciding node; empty means Config.Node.
	Node string `json:"node,omitempty"`
	// Source is the front end: grpc, http, forward_auth, envoy, gateway.
	Source string `json:"source,omitempty"`
	// Mode is strict, leased, mixed or policy.
	Mode          string `json:"mode,omitempty"`
	Decision      string `json:"decision,omitempty"` // ALLOW, DENY or THROTTLE
	DelayMs       int64  `json:"delay_ms,omitempty"` // THROTTLE: the wait the answer asked for
	Reason        string `json:"reason,omitempty"`   // OVER_LIMIT, WITHIN_LIMIT, SHADOW_WOULD_DENY, FAIL_OPEN, ...
	Policy        string `json:"policy,omitempty"`   // the deciding policy's id
	PolicyVersion uint64 `json:"policy_version,omitempty"`
	LatencyUS     int64  `json:"latency_us,omitempty"`
	// DenyCache says the node denied from its deny cache: the bucket's
	// shard denied it moments ago, and the check took no Raft commit.
	DenyCache bool `json:"deny_cache,omitempty"`

	Descriptors Descriptors `json:"descriptors,omitzero"`
	// Policies is every evaluated policy's verdict.
	Policies []Verdict `json:"policies,omitempty"`

	// SampleRate is the chance that a record of this kind is logged: 1 for
	// the always-logged kinds, the allow fraction for allows, so analytics
	// weight a sampled allow by 1/SampleRate. The logger sets it.
	SampleRate float64 `json:"sample_rate"`
	// Truncated says the line was too long (MaxLineBytes) and was written
	// without its policies and custom descriptors. The logger sets it.
	Truncated bool `json:"truncated,omitempty"`

	// Kind is what the decision was; zero means KindOf(Decision, Reason).
	// It is not written: SampleRate tells sampled records apart.
	Kind Kind `json:"-"`
}

// Descriptors are the request's dimensions. Empty ones are not written.
type Descriptors struct {
	TenantID   string `json:"tenant_id,omitempty"`
	APIKeyID   string `json:"api_key_id,omitempty"`
	UserID     string `json:"user_id,omitempty"`
	IP         string `json:"ip,omitempty"`
	Route      string `json:"route,omitempty"`
	Method     string `json:"method,omitempty"`
	Service    string `json:"service,omitempty"`
	Region     string `json:"region,omitempty"`
	TenantTier string `json:"tenant_tier,omitempty"`
	// Custom holds custom descriptors by name (without "custom."); entries
	// with an empty value are not written.
	Custom map[string]string `json:"custom,omitempty"`
}

// IsZero reports whether no descriptor is set (encoding/json's omitzero
// uses it; AppendJSON agrees).
func (d Descriptors) IsZero() bool {
	if d.TenantID != "" || d.APIKeyID != "" || d.UserID != "" || d.IP != "" || d.Route != "" ||
		d.Method != "" || d.Service != "" || d.Region != "" || d.TenantTier != "" {
		return false
	}
	for _, v := range d.Custom {
		if v != "" {
			return false
		}
	}
	return true
}

// Verdict is one evaluated policy's answer.
type Verdict struct {
	ID        string `json:"id,omitempty"`
	Mode      string `json:"mode,omitempty"`     // HARD, SOFT, SHADOW
	Decision  string `json:"decision,omitempty"` // ALLOW, DENY or THROTTLE
	Reason    string `json:"reason,omitempty"`
	Remaining int64  `json:"remaining"`
	Limit     int64  `json:"limit"`
	Key       string `json:"key,omitempty"` // the bucket key
}

// kind is the record's Kind, or the one its decision and reason name.
func (r *Record) kind() Kind {
	if r.Kind.valid() {
		return r.Kind
	}
	return KindOf(r.Decision, r.Reason)
}
