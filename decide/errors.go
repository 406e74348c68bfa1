package decide

import (
	"errors"
	"fmt"
)

// Errors a check is refused with. Front ends map them to their status
// codes (package api); nothing in this package knows a wire.
var (
	// ErrNoCluster: the node is not part of a bootstrapped cluster yet
	// (Shards has no routing).
	ErrNoCluster = errors.New("decide: node is not part of a bootstrapped cluster yet")
	// ErrPoliciesBehind: the policy set has not caught up with the
	// cluster's since the node started; deciding with an older set could
	// ignore a newer policy or block.
	ErrPoliciesBehind = errors.New("decide: this node is catching up with the cluster's policy set after a restart; retry, or ask another node")
	// ErrNoTime: the caller's deadline is inside the reserve kept for the
	// answer's way back; no strict decision can reach it in time.
	ErrNoTime = fmt.Errorf("decide: the deadline leaves no time to decide (the node keeps max(10%%, %s) of it for the answer)", minReserve)
	// ErrRejected is what a Shards implementation wraps when the shard
	// refused a batch as malformed: a bug, not the shard's health.
	ErrRejected = errors.New("decide: batch rejected as malformed")
	// errNoDecision: the shard could not decide within the deadline; the
	// items' fail modes answer.
	errNoDecision = errors.New("decide: shard could not decide in time")
)

// FieldError is a request refused for one field, named as the wire names
// it ("items[2].key", "descriptors.ip"). A bad request changes nothing.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func badRequest(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
