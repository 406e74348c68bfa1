package decide

import (
	"context"
	"errors"
	"time"
)

// The two ways a check's time runs out, as context causes, so that submit
// can tell the shard's failure from the caller's choice.
var (
	// errCheckTimeout: the node's own check timeout passed: the shard
	// could not decide in that time.
	errCheckTimeout = errors.New("decide: no decision within the check timeout")
	// errCallerBudget: the caller's deadline, less the reserve for the
	// answer's way back, passed first. Short deadlines are the caller's
	// choice and say nothing about the shard.
	errCallerBudget = errors.New("decide: the caller's deadline left no time to decide")
)

// minReserve is the least time kept back from a caller's deadline: enough
// for the answer to cross a data-center network and be decoded.
const minReserve = 2 * time.Millisecond

// reserve is the part of a caller's remaining time kept for the answer to
// reach it, so that the fail mode's answer arrives before the caller gives
// up: a tenth of it (a slow network is slow in proportion), at least
// minReserve.
func reserve(remaining time.Duration) time.Duration {
	return max(remaining/10, minReserve)
}

// ownDeadline marks a context whose deadline is already the node's own
// check timeout (WithCheckTimeout).
type ownDeadline struct{}

// WithCheckTimeout bounds ctx by the node's own check timeout, for a caller
// that set none in its request (a streamed check): the engine keeps it as
// it is, with no reserve taken off, and a timeout counts against the shard.
func WithCheckTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(context.WithValue(ctx, ownDeadline{}, true), timeout, errCheckTimeout)
}

// checkContext bounds a check's work by checkTimeout. Its cause says which
// bound ended it. Deadlines are the context's, measured on the runtime's
// clock, not on Config.Clock.
func (e *Engine) checkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Value(ownDeadline{}) != nil {
		return context.WithCancel(ctx)
	}
	caller, ok := ctx.Deadline()
	d, cause := checkTimeout(time.Until(caller), ok, e.cfg.CheckTimeout)
	return context.WithTimeoutCause(ctx, d, cause)
}

// checkTimeout is min(the caller's remaining time less the reserve, the
// check timeout), with the cause that names it.
func checkTimeout(remaining time.Duration, hasCaller bool, timeout time.Duration) (time.Duration, error) {
	if hasCaller {
		if c := remaining - reserve(remaining); c < timeout {
			return c, errCallerBudget
		}
	}
	return timeout, errCheckTimeout
}
