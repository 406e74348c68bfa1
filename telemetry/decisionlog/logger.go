package decisionlog

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Logger. The zero value (plus sinks) is the default.
type Config struct {
	// Sinks receive every line; none is allowed (subscribers only).
	Sinks []Sink
	// AllowFraction is the fraction of allows logged, in [0, 1]; 0 means
	// DefaultAllowFraction (0.1). Set NoAllows to log no allows.
	AllowFraction float64
	NoAllows      bool
	// Buffer is how many records the logger's queue holds (default 8192).
	Buffer int
	// SinkBuffer is how many lines each sink's queue holds (default
	// Buffer).
	SinkBuffer int
	// Registerer gets the metrics; nil keeps them unregistered. Loggers
	// sharing a Registerer share its series.
	Registerer prometheus.Registerer
	// Node fills Record.Node when the caller leaves it empty.
	Node string
	// Now fills Record.Time when the caller leaves it zero (default
	// time.Now).
	Now func() time.Time
	// Rand is the source of the allow sampling: uniform 64-bit numbers,
	// safe for concurrent use (default math/rand/v2's Uint64).
	Rand func() uint64
}

// Logger is a decision log. Its methods are safe for concurrent use; a nil
// *Logger logs nothing (Wants is false). One writer goroutine owns the
// encoding and the hand-off to sinks and subscribers; each sink has a
// goroutine of its own (sinkRunner).
type Logger struct {
	queue   chan Record
	closing atomic.Bool // no more records are taken

	threshold uint64 // an allow is logged when Rand()>>11 < threshold (53-bit fixed point)
	fraction  float64
	rnd       func() uint64 // nil: math/rand/v2's
	now       func() time.Time
	node      string

	accepted   [numKinds]prometheus.Counter
	queueDrops prometheus.Counter

	sinks []*sinkRunner
	subs  subscribers

	stop       chan struct{}
	stopOnce   sync.Once
	closeCtx   context.Context // set before stop is closed
	writerDone chan struct{}
	cancelRun  context.CancelFunc

	lineHint int // the writer's guess at the next line's size; writer-owned
}

// New validates c, starts the writer and one goroutine per sink.
func New(c Config) (*Logger, error) {
	l, err := newLogger(c)
	if err != nil {
		return nil, err
	}
	l.start()
	return l, nil
}

// newLogger makes a logger without starting it (tests fill its queue).
func newLogger(c Config) (*Logger, error) {
	if err := c.fill(); err != nil {
		return nil, err
	}
	m, err := newMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	l := &Logger{
		queue:      make(chan Record, c.Buffer),
		threshold:  uint64(math.Round(c.AllowFraction * (1 << 53))),
		fraction:   c.AllowFraction,
		rnd:        c.Rand,
		now:        c.Now,
		node:       c.Node,
		queueDrops: m.dropped.WithLabelValues(whereQueue),
		subs:       subscribers{dropped: m.dropped.WithLabelValues(whereSubscriber)},
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
		lineHint:   256,
	}
	for k := Deny; k < numKinds; k++ {
		l.accepted[k] = m.records.WithLabelValues(k.String())
	}
	for _, s := range c.Sinks {
		l.sinks = append(l.sinks, newSinkRunner(s, c.SinkBuffer, m))
	}
	return l, nil
}

func (c *Config) fill() error {
	f := c.AllowFraction
	switch {
	case math.IsNaN(f) || f < 0 || f > 1:
		return configErr("Config.AllowFraction %v is not between 0 and 1", f)
	case c.NoAllows && f != 0:
		return configErr("Config.NoAllows is set and so is Config.AllowFraction (%v)", f)
	case f == 0 && !c.NoAllows:
		c.AllowFraction = DefaultAllowFraction
	}
	if err := fillBuffer("Config.Buffer", &c.Buffer, DefaultBuffer); err != nil {
		return err
	}
	if err := fillBuffer("Config.SinkBuffer", &c.SinkBuffer, c.Buffer); err != nil {
		return err
	}
	for i, s := range c.Sinks {
		if s == nil {
			return configErr("Config.Sinks[%d] is nil", i)
		}
		if s.Name() == "" {
			return configErr("Config.Sinks[%d] has no Name (its metrics label)", i)
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

func fillBuffer(field string, n *int, def int) error {
	switch {
	case *n < 0 || *n > MaxBuffer:
		return configErr("%s %d is not between 0 (the default, %d) and %d", field, *n, def, MaxBuffer)
	case *n == 0:
		*n = def
	}
	return nil
}

func (l *Logger) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancelRun = cancel
	for _, s := range l.sinks {
		go s.run(ctx)
	}
	go l.run()
}

// Wants reports whether a decision of kind k is to be logged, so that the
// caller builds a Record only then: for an Allow with probability
// AllowFraction (each call draws anew; Log does not sample again), always
// for Deny, Throttle, ShadowWouldDeny, FailOpen and any other kind.
func (l *Logger) Wants(k Kind) bool {
	if l == nil {
		return false
	}
	if k != Allow {
		return true
	}
	var x uint64
	if l.rnd != nil {
		x = l.rnd()
	} else {
		x = rand.Uint64() // a direct call: a third cheaper than through a func value
	}
	return x>>11 < l.threshold
}

// Log queues a copy of r without blocking; if the queue is full, the record
// is dropped and counted (where="queue"). A zero Time becomes now. After
// Close, Log does nothing.
func (l *Logger) Log(r *Record) {
	if l == nil || r == nil || l.closing.Load() {
		return
	}
	if len(l.queue) == cap(l.queue) {
		// Full: drop before paying for the copy and the clock, so an
		// overloaded log costs checks least.
		l.queueDrops.Inc()
		return
	}
	rec := *r
	rec.Kind = r.kind()
	if rec.Time.IsZero() {
		rec.Time = l.now()
	}
	select {
	case l.queue <- rec:
		l.accepted[rec.Kind].Inc()
	default:
		l.queueDrops.Inc()
	}
}

// Close stops taking records, writes what is queued to the sinks, closes
// the sinks and subscriptions, and returns when all is written or ctx
// ends. Past ctx, writes in progress are cancelled (an HTTP post) and
// what is left is dropped; a sink stuck in a write that ignores its
// context (a blocked pipe) keeps its goroutine until the write returns.
// Records logged while Close runs may be lost.
func (l *Logger) Close(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.stopOnce.Do(func() {
		l.closing.Store(true)
		l.closeCtx = ctx
		close(l.stop)
	})
	if err := l.wait(ctx, l.writerDone); err != nil {
		return err
	}
	for _, s := range l.sinks {
		if err := l.wait(ctx, s.done); err != nil {
			return err
		}
	}
	l.cancelRun()
	return nil
}

func (l *Logger) wait(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		l.cancelRun()
		return fmt.Errorf("decisionlog: close: %w", ctx.Err())
	}
}

// writerPause is how long the writer rests after emptying the queue.
// Waking for every record costs a scheduler round trip per record (more
// than encoding it); resting lets a steady stream gather, so the writer
// and the sinks wake a few hundred times a second at most. The queue must
// hold what arrives meanwhile: 8192 records in 2ms is 4M a second.
const writerPause = 2 * time.Millisecond

// run is the writer: it owns encoding and the hand-off to sinks and
// subscribers.
func (l *Logger) run() {
	defer close(l.writerDone)
	rest := time.NewTimer(writerPause)
	defer rest.Stop()
	for {
		select {
		case r := <-l.queue:
			l.write(&r, nil)
		case <-l.stop:
			l.drain()
			return
		}
		l.writeQueued()
		rest.Reset(writerPause)
		select {
		case <-rest.C:
		case <-l.stop:
			l.drain()
			return
		}
	}
}

// writeQueued writes the records queued now, without waiting for more.
func (l *Logger) writeQueued() {
	for {
		select {
		case r := <-l.queue:
			l.write(&r, nil)
		default:
			return
		}
	}
}

// drain writes what is queued, waiting for room in sink queues until
// Close's context ends, then closes the sinks' queues and subscriptions.
func (l *Logger) drain() {
	defer l.subs.closeAll()
	for {
		select {
		case r := <-l.queue:
			l.write(&r, l.closeCtx)
		default:
			for _, s := range l.sinks {
				close(s.in)
			}
			return
		}
	}
}

// write encodes r and offers the line to every sink and subscriber;
// closing is Close's context while draining, else nil.
func (l *Logger) write(r *Record, closing context.Context) {
	l.complete(r)
	line := l.encode(r)
	if line == nil {
		l.queueDrops.Inc()
		return
	}
	for _, s := range l.sinks {
		if closing != nil {
			s.offerWait(closing, line)
		} else {
			s.offer(line)
		}
	}
	l.subs.deliver(r, line)
}

func (l *Logger) complete(r *Record) {
	if r.Node == "" {
		r.Node = l.node
	}
	r.SampleRate = 1
	if r.Kind == Allow {
		r.SampleRate = l.fraction
	}
}

// encode returns r's line with its newline, in a slice of its own that the
// sinks share read-only; nil if it is too long even truncated.
func (l *Logger) encode(r *Record) []byte {
	line := r.AppendJSON(make([]byte, 0, l.lineHint))
	if len(line) >= MaxLineBytes {
		t := *r
		t.Policies, t.Descriptors.Custom, t.Truncated = nil, nil, true
		if line = t.AppendJSON(line[:0]); len(line) >= MaxLineBytes {
			return nil
		}
	}
	l.lineHint = min(len(line)+64, MaxLineBytes)
	return append(line, '\n')
}
