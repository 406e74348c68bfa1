package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Limit is the limit an item is checked against. Its fields mean what they
// mean in quorate's API (rpc/quoratev1 Item).
type Limit struct {
	// Algorithm is a short algorithm name: token_bucket, gcra,
	// sliding_window, fixed_window, sliding_log, leaky_bucket_policing,
	// leaky_bucket_shaping.
	Algorithm string
	Limit     int64
	Period    time.Duration
	// Burst is the bucket's capacity; 0 means Limit.
	Burst int64
	// FailOpen allows an item whose shard cannot decide; otherwise it is
	// denied (reason Unavailable). Benchmarks default to closed, so an
	// unavailable shard cannot pass for admissions.
	FailOpen bool
}

// Item is one limit of a request: a bucket (Name and Key) and what the
// request takes from it.
type Item struct {
	Name  string
	Key   string
	Limit *Limit // shared by all items of a run; never modified
	Cost  int64
}

// Reason is why an item got its decision, as quorate reports it.
type Reason uint8

// The reasons.
const (
	ReasonUnknown     Reason = iota // the driver could not tell
	ReasonWithinLimit               // allowed and charged
	ReasonOverLimit                 // denied: no room
	ReasonFailOpen                  // allowed uncharged: the shard could not decide
	ReasonUnavailable               // denied: the shard could not decide
	ReasonRefunded                  // had room, but another item of the request was denied
	numReasons
)

var reasonNames = [numReasons]string{"UNKNOWN", "WITHIN_LIMIT", "OVER_LIMIT", "FAIL_OPEN", "UNAVAILABLE", "REFUNDED"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Outcome is the decision on one item.
type Outcome struct {
	Allowed   bool
	Reason    Reason
	Remaining int64
	// DecidedAt is the limiter's own time of the decision in Unix
	// nanoseconds, or 0 if it does not say. The admission accountant uses
	// it when present; otherwise it falls back to the midpoint of the
	// request's send and receive times on the tool's clock.
	DecidedAt int64
	// Prepaid: decided from budget the limiter charged before this decision
	// (a quorate lease): DecidedAt is when the budget was spent, not when
	// the bucket was charged. The accountant allows for it.
	Prepaid bool
}

// Driver sends checks to one target. Implementations must be safe for
// concurrent use by every worker of a run.
type Driver interface {
	// Check decides one request: the items are all-or-nothing, as in
	// quorate's API. On success it fills out[i] with the decision on
	// items[i] (len(out) == len(items)). An error means the request as a
	// whole failed; ErrorCode classifies it.
	Check(ctx context.Context, items []Item, out []Outcome) error
	// Close releases the driver's connections.
	Close() error
}

// CodedError is an error that names its own code for the error counts
// (drivers whose errors are not gRPC statuses implement it).
type CodedError interface {
	error
	Code() string
}

// ErrorCode classifies a failed request for the report: the code of a
// CodedError, the gRPC status code in upper snake case (UNAVAILABLE,
// UNIMPLEMENTED, ...), CANCELED or DEADLINE_EXCEEDED for context errors, and
// UNKNOWN for anything else.
func ErrorCode(err error) string {
	var ce CodedError
	switch {
	case err == nil:
		return "OK"
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, context.DeadlineExceeded):
		return "DEADLINE_EXCEEDED"
	case errors.Is(err, context.Canceled):
		return "CANCELED"
	}
	if s, ok := status.FromError(err); ok {
		if name, ok := grpcCodeNames[s.Code()]; ok {
			return name
		}
		return fmt.Sprintf("CODE_%d", uint32(s.Code()))
	}
	return "UNKNOWN"
}

// grpcCodeNames are the canonical names of the gRPC codes (codes.Code's
// String is CamelCase).
var grpcCodeNames = map[codes.Code]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// ErrorMessage is err's message without a gRPC status's "rpc error: code =
// X desc = " wrapping, for reports that already print the code.
func ErrorMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}
