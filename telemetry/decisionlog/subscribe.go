package decisionlog

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Filter picks the records a subscriber sees; an empty field matches
// anything.
type Filter struct {
	// Policy matches the deciding policy or any evaluated one, so a tail on
	// a SHADOW policy sees its would-denies.
	Policy string
	Tenant string // Descriptors.TenantID
	// Decision is ALLOW, DENY or THROTTLE, in any case.
	Decision string
	Node     string
}

func (f *Filter) match(r *Record) bool {
	if f.Tenant != "" && f.Tenant != r.Descriptors.TenantID ||
		f.Node != "" && f.Node != r.Node ||
		f.Decision != "" && !strings.EqualFold(f.Decision, r.Decision) {
		return false
	}
	if f.Policy == "" || f.Policy == r.Policy {
		return true
	}
	for i := range r.Policies {
		if r.Policies[i].ID == f.Policy {
			return true
		}
	}
	return false
}

type subscription struct {
	f       Filter
	ch      chan []byte
	dropped atomic.Uint64
}

// subscribers are the live tails. The writer delivers under mu, and a
// channel is closed under mu, so no send meets a closed channel.
type subscribers struct {
	dropped prometheus.Counter
	n       atomic.Int32 // len(list), read without mu on every record

	mu     sync.Mutex
	list   []*subscription // guarded by mu
	closed bool            // guarded by mu
}

// Subscribe opens a live tail: the lines of the records that match f, as
// the log writes them (the same sampling), on a channel of buffer lines
// (0: DefaultSubscriberBuffer). A subscriber that falls behind loses lines,
// counted by dropped and in quorate_decision_log_dropped_total{where=
// "subscriber"}; it never slows the log. Each line is the subscriber's
// own, ending in '\n'. cancel ends the tail and closes the channel, as
// Close does; at most MaxSubscribers tails are open at once.
func (l *Logger) Subscribe(f Filter, buffer int) (lines <-chan []byte, dropped func() uint64, cancel func(), err error) {
	if l == nil {
		return nil, nil, nil, ErrDisabled
	}
	if buffer < 0 || buffer > MaxBuffer {
		return nil, nil, nil, configErr("Subscribe buffer %d is not between 0 (the default, %d) and %d", buffer, DefaultSubscriberBuffer, MaxBuffer)
	}
	if buffer == 0 {
		buffer = DefaultSubscriberBuffer
	}
	s := &subscription{f: f, ch: make(chan []byte, buffer)}
	if err := l.subs.add(s); err != nil {
		return nil, nil, nil, err
	}
	return s.ch, s.dropped.Load, func() { l.subs.remove(s) }, nil
}

func (ss *subscribers) add(s *subscription) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case ss.closed:
		return ErrClosed
	case len(ss.list) >= MaxSubscribers:
		return ErrTooManySubscribers
	}
	ss.list = append(ss.list, s)
	ss.n.Store(int32(len(ss.list)))
	return nil
}

func (ss *subscribers) remove(s *subscription) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i, t := range ss.list {
		if t == s {
			ss.list = append(ss.list[:i], ss.list[i+1:]...)
			ss.n.Store(int32(len(ss.list)))
			close(s.ch)
			return
		}
	}
}

func (ss *subscribers) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.list {
		close(s.ch)
	}
	ss.list, ss.closed = nil, true
	ss.n.Store(0)
}

// deliver offers line to every matching subscriber without blocking.
func (ss *subscribers) deliver(r *Record, line []byte) {
	if ss.n.Load() == 0 {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.list {
		if !s.f.match(r) {
			continue
		}
		// The writer is the only sender, so room seen here stays room; a
		// full channel costs no copy.
		if len(s.ch) == cap(s.ch) {
			s.dropped.Add(1)
			ss.dropped.Inc()
			continue
		}
		s.ch <- append([]byte(nil), line...)
	}
}
