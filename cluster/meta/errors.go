package meta

import (
	"fmt"

	"google.golang.org/grpc/codes"
)

// Error is why a node could not make a change to the meta group's state
// (or answer a request about it): a kind, which a front end maps to its
// status code, and the message for the caller. The state machine's own
// refusals come back in Result (Refusal turns them into an Error).
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Kind classifies an Error.
type Kind int

// The kinds of Error.
const (
	// Invalid: the request is malformed or does not apply to the state.
	Invalid Kind = iota + 1
	// NotFound: it names a policy, block or node the state does not hold.
	NotFound
	// Conflict: the state does not allow it now (a move in progress, a
	// node still alive, too few nodes would remain).
	Conflict
	// NoLeader: no meta leader could be reached, or the node has no
	// cluster record yet; asking again may succeed.
	NoLeader
	// Unknown: the change was proposed, and whether it applied is unknown.
	Unknown
	// Timeout: the caller's deadline passed first.
	Timeout
)

// kindCodes are the gRPC codes of the kinds: the public port (package
// api) and the peer port answer with them, and a peer's code becomes its
// kind again.
var kindCodes = map[Kind]codes.Code{
	Invalid:  codes.InvalidArgument,
	NotFound: codes.NotFound,
	Conflict: codes.FailedPrecondition,
	NoLeader: codes.Unavailable,
	Unknown:  codes.Unknown,
	Timeout:  codes.DeadlineExceeded,
}

// Code is the kind's gRPC code (codes.Unknown for a kind it does not know).
func (k Kind) Code() codes.Code {
	if c, ok := kindCodes[k]; ok {
		return c
	}
	return codes.Unknown
}

// KindOf is the kind whose code is c, if one is.
func KindOf(c codes.Code) (Kind, bool) {
	for k, kc := range kindCodes {
		if kc == c {
			return k, true
		}
	}
	return 0, false
}

// Errorf makes an Error of kind k.
func Errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Refusal is the state machine's refusal in r as an Error, or nil if r
// says the command applied.
func (r Result) Refusal() error {
	switch {
	case r.Err == "" && r.Code == CodeOK:
		return nil
	case r.Code == CodeNotFound:
		return &Error{Kind: NotFound, Msg: r.Err}
	case r.Code == CodeStale:
		return &Error{Kind: Conflict, Msg: r.Err}
	}
	return &Error{Kind: Invalid, Msg: r.Err}
}
