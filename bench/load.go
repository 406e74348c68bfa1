package bench

import (
	"errors"
	"fmt"
	"time"
)

// Load is how requests are sent, and when a run stops.
type Load struct {
	// Concurrency is the number of clients of a closed loop; in an open
	// loop, the most requests in flight at once (a request scheduled while
	// all are busy waits, and that wait counts in its latency).
	Concurrency int
	// Rate is the open loop's arrival rate in requests per second; 0 means
	// a closed loop.
	Rate float64
	// Duration bounds the run's time; 0 means no time bound.
	Duration time.Duration
	// Requests bounds the number of requests; 0 means no bound. A run
	// stops at whichever bound it reaches first.
	Requests int64
	// Timeout is each request's deadline.
	Timeout time.Duration
}

// DefaultTimeout is a request's deadline when Load.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// Open reports whether l is an open loop.
func (l Load) Open() bool { return l.Rate > 0 }

// Validate reports the first problem with l.
func (l Load) Validate() error {
	switch {
	case l.Concurrency < 1:
		return fmt.Errorf("concurrency %d: must be at least 1", l.Concurrency)
	case l.Rate < 0:
		return fmt.Errorf("rate %g: must not be negative", l.Rate)
	case l.Duration < 0 || l.Requests < 0 || l.Timeout < 0:
		return errors.New("duration, requests and timeout must not be negative")
	case l.Duration == 0 && l.Requests == 0:
		// A run must stop by itself.
		return errors.New("no bound: give a duration, a number of requests, or both")
	}
	return nil
}

// Describe is l in one line, for reports.
func (l Load) Describe() string {
	var s string
	if l.Open() {
		s = fmt.Sprintf("open loop at %g req/s (at most %d in flight)", l.Rate, l.Concurrency)
	} else {
		s = fmt.Sprintf("closed loop, %d clients", l.Concurrency)
	}
	switch {
	case l.Duration > 0 && l.Requests > 0:
		s += fmt.Sprintf(", %v or %d requests", l.Duration, l.Requests)
	case l.Duration > 0:
		s += fmt.Sprintf(", %v", l.Duration)
	default:
		s += fmt.Sprintf(", %d requests", l.Requests)
	}
	return s
}

func (l Load) timeout() time.Duration {
	if l.Timeout == 0 {
		return DefaultTimeout
	}
	return l.Timeout
}

// split returns the load of one of n rounds: the bounds divided evenly.
func (l Load) split(n int) Load {
	if n <= 1 {
		return l
	}
	l.Duration /= time.Duration(n)
	if l.Requests > 0 {
		l.Requests = max(1, l.Requests/int64(n))
	}
	return l
}
