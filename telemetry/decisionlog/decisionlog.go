// Package decisionlog records a rate limiter's decisions that matter (every
// deny, shadow would-deny and fail-open, and a sample of allows) as JSON
// lines to files, stdout, HTTP collectors and live tails, off the hot path.
//
// A check asks Wants before it builds a Record, so an allow that is sampled
// out costs one random number. Log copies the record into a bounded queue
// and never blocks: a full queue drops the record and counts it. One writer
// goroutine encodes records and hands each line to every sink's own bounded
// queue and to matching subscribers, so a slow or stuck sink drops its own
// lines (counted) and starves nothing else.
//
//	l, err := decisionlog.New(decisionlog.Config{Sinks: sinks, Node: "n1", Registerer: reg})
//	...
//	if l.Wants(decisionlog.Deny) {
//		l.Log(&decisionlog.Record{Decision: "DENY", Reason: "OVER_LIMIT", Policy: "plan_free", ...})
//	}
//	defer l.Close(ctx)
package decisionlog

import (
	"errors"
	"fmt"
	"time"
)

// Kind is what a decision was, as far as logging it goes: the always-logged
// kinds and the sampled allow.
type Kind uint8

// The kinds. A Record whose Kind is zero takes it from its Decision and
// Reason (KindOf).
const (
	Deny            Kind = iota + 1 // a denied request
	ShadowWouldDeny                 // allowed, but a SHADOW policy would have denied it
	FailOpen                        // allowed because the store could not decide
	Allow                           // an ordinary allow: sampled
	Throttle                        // admitted after a wait (a THROTTLE policy, a SOFT policy's friction)
	numKinds
)

var kindLabels = [...]string{
	Deny:            "deny",
	ShadowWouldDeny: "shadow_would_deny",
	FailOpen:        "fail_open",
	Allow:           "allow",
	Throttle:        "throttle",
}

// String is the kind's label in quorate_decision_log_records_total.
func (k Kind) String() string {
	if k.valid() {
		return kindLabels[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

func (k Kind) valid() bool { return k >= Deny && k < numKinds }

// KindOf is the kind of a decision by its contract names: a DENY is Deny,
// a THROTTLE Throttle, an allow with reason FAIL_OPEN or SHADOW_WOULD_DENY
// is that, and any other allow is Allow.
func KindOf(decision, reason string) Kind {
	switch {
	case decision == "DENY":
		return Deny
	case decision == "THROTTLE":
		return Throttle
	case reason == "FAIL_OPEN":
		return FailOpen
	case reason == "SHADOW_WOULD_DENY":
		return ShadowWouldDeny
	}
	return Allow
}

// Limits that keep every queue and message bounded.
const (
	DefaultAllowFraction = 0.1
	DefaultBuffer        = 8192
	MaxBuffer            = 1 << 20
	MaxSubscribers       = 16
	// DefaultSubscriberBuffer is a subscription's channel when Subscribe is
	// given 0.
	DefaultSubscriberBuffer = 256
	// MaxLineBytes bounds one encoded record. A longer one is written
	// without its policies and custom descriptors, marked truncated; if it
	// is still too long it is dropped (counted as where="queue").
	MaxLineBytes = 64 << 10
	// FlushInterval is how long the file sink holds lines before it
	// writes them (sooner when a batch is full): what a crash may lose.
	FlushInterval = 100 * time.Millisecond
)

// Errors. Configuration errors wrap ErrConfig and name the field.
var (
	// ErrConfig is wrapped by every error about a bad Config, sink
	// configuration or sink spec.
	ErrConfig = errors.New("decisionlog: bad configuration")
	// ErrTooManySubscribers: MaxSubscribers tails are already open.
	ErrTooManySubscribers = fmt.Errorf("decisionlog: at most %d subscribers at once", MaxSubscribers)
	// ErrClosed: the logger is closed.
	ErrClosed = errors.New("decisionlog: logger closed")
	// ErrDisabled: the logger is nil (no decision log configured).
	ErrDisabled = errors.New("decisionlog: no decision log configured")
)

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}
