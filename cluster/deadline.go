package cluster

import (
	"context"
	"errors"
	"time"
)

// The two ways a check's time runs out, as context causes, so that submit
// can tell the shard's failure from the caller's choice.
var (
	// errCheckTimeout: the node's own --check-timeout passed, measured on
	// its own clock: the shard could not decide in that time.
	errCheckTimeout = errors.New("cluster: no decision within the check timeout")
	// errCallerBudget: the caller's deadline, less the reserve for the
	// answer's way back, passed first. Short deadlines are the caller's
	// choice and say nothing about the shard.
	errCallerBudget = errors.New("cluster: the caller's deadline left no time to decide")
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
// check timeout (withCheckTimeout).
type ownDeadline struct{}

// withCheckTimeout bounds ctx by the node's own check timeout, for a caller
// that set none in its request: checkContext keeps it as it is, with no
// reserve taken off.
func withCheckTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(context.WithValue(ctx, ownDeadline{}, true), timeout, errCheckTimeout)
}

// checkContext bounds a check's work by checkDeadline. Its cause says which
// bound ended it.
func (n *Node) checkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Value(ownDeadline{}) != nil {
		return context.WithCancel(ctx)
	}
	caller, ok := ctx.Deadline()
	d, cause := checkDeadline(time.Now(), caller, ok, n.cfg.CheckTimeout)
	return context.WithDeadlineCause(ctx, d, cause)
}

// checkDeadline is min(the caller's deadline less the reserve, now + the
// check timeout), with the cause that names it.
func checkDeadline(now, caller time.Time, hasCaller bool, timeout time.Duration) (time.Time, error) {
	own := now.Add(timeout)
	if hasCaller {
		if c := caller.Add(-reserve(caller.Sub(now))); c.Before(own) {
			return c, errCallerBudget
		}
	}
	return own, errCheckTimeout
}

// outcomeOf classifies a submit's result for the breaker. A context that
// ended counts against the shard only when its deadline was the node's own
// (errCheckTimeout, or a plain deadline of the node's background work such
// as lease renewals), never when the caller cancelled or its short
// deadline ran out.
func outcomeOf(ctx context.Context, err error) outcome {
	if err == nil {
		return succeeded
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(cause, errCallerBudget) || errors.Is(cause, context.Canceled) {
			return neutral
		}
		return failed
	}
	if errors.Is(err, errRejected) {
		return neutral // a malformed batch: a bug to fix, not the shard's health
	}
	// Leadership lost under the command, the shard closing, or a forwarded
	// call that failed in flight while this check still had time: a
	// forward carries this check's deadline, so a peer's timeout cannot
	// come back before this context ends.
	return failed
}
