package decide

import (
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/policy"
)

// Decision is a verdict: of one bucket, one policy, or the whole request.
type Decision uint8

// The verdicts. The zero value is no verdict yet.
const (
	Allow Decision = iota + 1
	Deny
	// Throttle admits the request after a wait (Answer.Delay): a THROTTLE
	// policy over its rate, or a SOFT policy's friction.
	Throttle
)

// String is the decision's metric label.
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Throttle:
		return "throttle"
	}
	return "deny"
}

// Admits reports whether the request may proceed (after Answer.Delay).
func (d Decision) Admits() bool { return d == Allow || d == Throttle }

// Reason says why a verdict was reached.
type Reason uint8

// The reasons.
const (
	ReasonUnspecified Reason = iota
	WithinLimit
	OverLimit
	FailOpen        // the shard could not decide; the item fails open
	Unavailable     // the shard could not decide; the item fails closed (or its emergency cap is spent)
	Refunded        // allowed by its bucket, given back because the request was denied (or not tried: Result.Cached)
	EmergencyBlock  // an operator's block matched the request
	OverLimitSoft   // a SOFT policy is over its limit; the request is allowed
	ShadowWouldDeny // a SHADOW policy would have denied; the request is allowed
	NoPolicy        // no policy matched the descriptors
	Throttled       // a THROTTLE policy is over its rate; the request waits its delay
)

var reasonLabels = [...]string{
	ReasonUnspecified: "unspecified",
	WithinLimit:       "within_limit",
	OverLimit:         "over_limit",
	FailOpen:          "fail_open",
	Unavailable:       "unavailable",
	Refunded:          "refunded",
	EmergencyBlock:    "emergency_block",
	OverLimitSoft:     "over_limit_soft",
	ShadowWouldDeny:   "shadow_would_deny",
	NoPolicy:          "no_policy",
	Throttled:         "throttled",
}

// String is the reason's metric label.
func (r Reason) String() string {
	if int(r) < len(reasonLabels) {
		return reasonLabels[r]
	}
	return "unspecified"
}

// Mode is how a request asks to be decided. Its numbering is the wire's
// (quorate.v1.Mode), so a front end passes an unknown value through and
// validation names it.
type Mode int32

// The modes.
const (
	ModeDefault Mode = iota // strict
	Strict
	Leased
)

// FailMode is what an item's answer is when its shard cannot decide in
// time. Its numbering is the wire's (quorate.v1.FailMode).
type FailMode int32

// The fail modes.
const (
	FailDefault FailMode = iota // open
	FailOpenMode
	FailClosedMode
)

// Item is one bucket a low-level check names inline: its limit travels
// with the request.
type Item struct {
	Name, Key      string
	Algorithm      fsm.Algorithm // AlgorithmUnspecified is refused
	Limit          int64
	Period         time.Duration
	HasPeriod      bool   // the period was given (0 is refused either way)
	BadPeriod      string // why the wire's period is not a duration ("" if it is one)
	Burst          int64
	Cost           int64 // 0 means 1
	Fail           FailMode
	IdempotencyKey string
}

// Descriptors name who a request is and what it touches; the policy set
// says which limits apply.
type Descriptors struct {
	TenantID, APIKeyID, UserID, IP, Route, Method, Service, Region, TenantTier string
	IdempotencyKey                                                             string
	RiskScore                                                                  *float64 // nil: not given
	Custom                                                                     map[string]string
	Cost                                                                       int64 // 0 means 1
}

// Request is one check: either Items or Descriptors.
type Request struct {
	ID          string // the caller's request id, bounded, echoed by front ends
	Source      string // the front end it came through ("grpc", "http", ...), for the record
	Mode        Mode
	DryRun      bool // decide, consume nothing
	Items       []Item
	Descriptors *Descriptors
}

// Result is one bucket's answer.
type Result struct {
	Decision   Decision
	Reason     Reason
	Limit      int64 // the bucket's capacity
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Delay      time.Duration // a shaping or throttled bucket's wait before acting
	Shard      int           // the shard that decided it (or could not)
	Index      uint64        // the log entry that decided it; 0 if decided locally or by a fail mode
	DecidedAt  int64         // Unix ns: the state machine's time, or this node's for a local decision
	Algorithm  fsm.Algorithm
	PolicyID   string // descriptor checks: the policy the bucket belongs to
	Level      string // descriptor checks: the policy's limit or quota level
	// Cached: answered from this node's deny cache (Config.DenyCache), not
	// by the shard, and so with Index 0. Over its limit, the item is one
	// its shard denied moments ago, and DecidedAt is the state machine's
	// time the answer stands for; refunded, it was not tried, because
	// another item's cached denial denied the request.
	Cached bool
}

// PolicyResult is one applied policy's verdict in a descriptor check.
type PolicyResult struct {
	PolicyID   string
	Mode       policy.Mode
	Decision   Decision
	Reason     Reason
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Layer      string
	Algorithm  fsm.Algorithm
	// Key is the policy's bucket key: its key descriptors' values joined
	// with "\x1f" in key order, empty for a global policy.
	Key string
}

// Answer is a decided request.
type Answer struct {
	Decision        Decision
	Reason          Reason
	Results         []Result
	AppliedPolicyID string
	PolicyVersion   uint64
	Policies        []PolicyResult
	DryRun          bool
}

// Applied is what a shard answered for a batch of ops (the lease table's
// shape: they are the same submissions).
type Applied = lease.Applied
