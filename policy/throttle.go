package policy

import (
	"math"
	"strings"
	"time"

	"github.com/quorate/quorate/fsm"
)

// MaxThrottleDelay bounds throttle.max_delay: a caller that holds a
// request longer than this is queueing it, not shaping it, and a proxy
// holding connections that long runs out of them.
const MaxThrottleDelay = time.Minute

// minFriction bounds throttle.friction from below, so that the queue a
// SOFT policy keeps to measure its overage (max_delay / friction units)
// stays small.
const minFriction = time.Millisecond

// throttleSpec is a policy's compiled throttle section.
type throttleSpec struct {
	maxDelay time.Duration
	friction time.Duration // SOFT only; 0 for THROTTLE
}

// Delay turns a throttled bucket's answer into the wait the request gets.
// A throttled bucket is decided by the state machine's shaper
// (LEAKY_BUCKET_SHAPING) at the policy's rate, with a queue longer than the
// policy's capacity by max_delay's worth of units: the shaper schedules
// every admitted unit one interval after the last, so requests that wait
// their delay arrive at exactly the rate, Burst of them at once after a
// quiet spell (GCRA's burst). The zero value is a bucket that is not
// throttled.
type Delay struct {
	// Burst is the units admitted without a wait: the policy's capacity
	// (1 for LEAKY_BUCKET_SHAPING, whose every unit queues).
	Burst int64
	// Interval is the shaper's time per unit (its period / limit, rounded
	// up as the state machine rounds it).
	Interval time.Duration
	// Friction, for a SOFT policy, is the wait per unit over the limit;
	// 0 means the exact wait that spaces the request to the rate.
	Friction time.Duration
	// Max is the longest wait: throttle.max_delay.
	Max time.Duration
}

// Throttled reports whether d is a throttled bucket's.
func (d Delay) Throttled() bool { return d.Max > 0 }

// Wait is the delay of a request of cost n that the shaper admitted after
// queued (its Result.Delay): the time until a GCRA of capacity Burst would
// admit it, or, with Friction, Friction per unit it is over, at most Max.
func (d Delay) Wait(queued time.Duration, n int64) time.Duration {
	if d.Interval <= 0 {
		return 0
	}
	over := int64(queued)
	if n > d.Burst {
		extra := n - d.Burst
		if extra > (math.MaxInt64-over)/int64(d.Interval) {
			return d.Max
		}
		over += extra * int64(d.Interval)
	} else {
		over -= (d.Burst - n) * int64(d.Interval)
	}
	if over <= 0 {
		return 0
	}
	if d.Friction > 0 {
		units := (over + int64(d.Interval) - 1) / int64(d.Interval)
		if units > int64(d.Max/d.Friction) {
			return d.Max
		}
		return time.Duration(units) * d.Friction
	}
	return min(time.Duration(over), d.Max)
}

// Queued is how many of a shaper's remaining units are the delay's
// (beyond the policy's capacity): an answer's remaining leaves them out.
func (d Delay) Queued(l fsm.Limit) int64 { return max(0, l.Burst-d.Burst) }

// throttled is the shaper that decides a throttled bucket of limit l (after
// any risk cut), and how its answers become waits.
func throttled(l fsm.Limit, t *throttleSpec) (fsm.Limit, Delay) {
	burst := l.Capacity()
	if l.Algorithm == fsm.LeakyShaping {
		burst = 1
	}
	interval := (int64(l.Period) + l.Limit - 1) / l.Limit
	d := Delay{Burst: burst, Interval: time.Duration(interval), Friction: t.friction, Max: t.maxDelay}
	// Enough queue beyond the burst for the longest wait: max_delay of
	// exact waits, or max_delay / friction units over the limit.
	extra := int64(t.maxDelay) / interval
	if t.friction > 0 {
		extra = int64((t.maxDelay + t.friction - 1) / t.friction)
	}
	// A risk cut lengthens the interval; the queue never outgrows what the
	// state machine accepts (a shorter queue only denies sooner).
	q := min(burst+extra, int64(fsm.MaxRefill)/interval, fsm.MaxLimit)
	return fsm.Limit{Algorithm: fsm.LeakyShaping, Limit: l.Limit, Period: l.Period, Burst: max(q, burst, 1)}, d
}

// throttle compiles the throttle section and checks that it fits the
// mode and the risk bands. partial: the policy may inherit its mode.
func (c *checker) throttle(e *entry, partial bool) {
	t := c.p.Throttle
	if t != nil {
		e.throttle = c.throttleSpec(t)
	}
	if partial {
		return
	}
	bandThrottles := e.risk != nil && e.risk.throttles()
	switch {
	case e.mode == Throttle && t == nil:
		c.fail("mode", "THROTTLE needs throttle: { max_delay: ... } (the longest a request may be held)")
	case t == nil:
		if bandThrottles {
			c.fail("risk.bands", "a band with action THROTTLE needs throttle: { max_delay: ... } on the policy")
		}
		return
	case e.mode == Shadow:
		c.fail("throttle", "a SHADOW policy never acts on a request: it cannot throttle")
	case e.mode == Soft && t.Friction == "":
		c.fail("throttle.friction", "required with mode SOFT: the wait each unit over the limit adds")
	case e.mode != Soft && t.Friction != "":
		c.fail("throttle.friction", "only with mode SOFT (mode %s throttles each request exactly to the rate)", e.mode)
	case e.mode == Hard && !bandThrottles:
		c.fail("throttle", "a HARD policy denies: use mode THROTTLE, or a risk band with action THROTTLE")
	}
	if bandThrottles && e.mode != Hard {
		c.fail("risk.bands", "action THROTTLE is for a HARD policy (this one is %s)", e.mode)
	}
	c.throttleLimits(e)
}

func (c *checker) throttleSpec(t *ThrottleConfig) *throttleSpec {
	spec := &throttleSpec{}
	if t.MaxDelay == "" {
		c.fail("throttle.max_delay", "required: the longest a request may be held, like 2s")
	} else {
		spec.maxDelay = c.duration("throttle.max_delay", t.MaxDelay, time.Millisecond, MaxThrottleDelay)
	}
	if t.Friction != "" {
		spec.friction = c.duration("throttle.friction", t.Friction, minFriction, MaxThrottleDelay)
		if spec.maxDelay > 0 && spec.friction > spec.maxDelay {
			c.fail("throttle.friction", "%s is more than max_delay %s", t.Friction, t.MaxDelay)
		}
	}
	return spec
}

func (c *checker) duration(path, s string, lo, hi time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		c.fail(path, "%q: want a duration like 500ms or 2s", s)
	case d < lo || d > hi:
		c.fail(path, "%s: want %s to %s", s, lo, hi)
	default:
		return d
	}
	return 0
}

// throttleLimits checks that each limit makes a shaper the state machine
// takes (GCRA's and the shaper's interval is at least fsm.MinInterval).
func (c *checker) throttleLimits(e *entry) {
	if e.throttle == nil || e.throttle.maxDelay == 0 {
		return
	}
	for _, it := range e.items {
		if it.limit.Period < fsm.MinInterval*time.Duration(it.limit.Limit) {
			c.fail("throttle", "limit %s: %d per %s is faster than one per %s, the closest a throttle spaces requests", it.name, it.limit.Limit, it.limit.Period, fsm.MinInterval)
			return
		}
		l, _ := throttled(it.limit, e.throttle)
		if err := l.Validate(); err != nil {
			c.fail("throttle", "limit %s cannot be throttled: %s", it.name, strings.TrimPrefix(err.Error(), "fsm: "))
			return
		}
	}
}

// throttles reports whether a band throttles.
func (r *risk) throttles() bool {
	for _, b := range r.bands {
		if b.throttle {
			return true
		}
	}
	return false
}

const actionThrottle = "THROTTLE"

// checkAction checks a band's action.
func (c *checker) checkAction(path, action string) {
	switch action {
	case "", "CUT", actionThrottle:
	default:
		c.fail(path, "%q: want CUT or THROTTLE", action)
	}
}

// evalThrottle is the mode a request is decided in by e (a THROTTLE band
// makes a HARD policy throttle it) and, when it throttles, the shaper for
// limit l.
func evalThrottle(e *entry, mode Mode, l fsm.Limit) (fsm.Limit, Delay) {
	if e.throttle == nil || e.throttle.maxDelay == 0 || (mode != Throttle && mode != Soft) {
		return l, Delay{}
	}
	return throttled(l, e.throttle)
}
