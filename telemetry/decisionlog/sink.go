package decisionlog

import (
	"context"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A Sink is where lines go. The logger runs each sink in a goroutine of its
// own behind a bounded queue (Config.SinkBuffer lines), gathers lines into
// batches as Batching says, and calls Write with one batch at a time, so a
// Sink needs no locking of its own.
type Sink interface {
	// Name is the sink's label in the metrics (stdout, file, http).
	Name() string
	// Batching says how lines are gathered before a Write.
	Batching() Batching
	// Write writes a batch of whole lines, each ending in '\n'. batch is
	// reused after Write returns. An error drops the batch (counted); it
	// is not retried.
	Write(ctx context.Context, batch []byte) error
	// Close releases the sink after its last Write.
	Close() error
}

// Batching is how a sink's lines are gathered into one Write.
type Batching struct {
	// MaxRecords and MaxBytes end a batch (a single longer line is a batch
	// of its own).
	MaxRecords, MaxBytes int
	// Interval 0 writes as soon as the sink's queue is empty, which
	// gathers what arrived while the last write ran. Interval > 0 holds
	// lines until a batch is full or a tick of NewTicker(Interval).
	Interval time.Duration
	// NewTicker makes the ticker; nil is time.NewTicker. Tests pass a
	// channel of their own.
	NewTicker func(time.Duration) (ticks <-chan time.Time, stop func())
}

func (b Batching) ticker() (<-chan time.Time, func()) {
	if b.Interval <= 0 {
		return nil, func() {}
	}
	if b.NewTicker != nil {
		return b.NewTicker(b.Interval)
	}
	t := time.NewTicker(b.Interval)
	return t.C, t.Stop
}

// sinkRunner owns one sink: only its goroutine calls the sink, and only
// the logger's writer sends to in (and closes it).
type sinkRunner struct {
	sink     Sink
	batching Batching
	in       chan []byte
	done     chan struct{}

	dropped, errors, bytes prometheus.Counter

	batch []byte // owned by the goroutine
	n     int    // lines in batch
}

func newSinkRunner(s Sink, buffer int, m *metrics) *sinkRunner {
	b := s.Batching()
	b.MaxRecords = max(b.MaxRecords, 1)
	b.MaxBytes = max(b.MaxBytes, 1)
	name := s.Name()
	return &sinkRunner{
		sink: s, batching: b,
		in:      make(chan []byte, buffer),
		done:    make(chan struct{}),
		dropped: m.dropped.WithLabelValues(name),
		errors:  m.errors.WithLabelValues(name),
		bytes:   m.bytes.WithLabelValues(name),
	}
}

// offer queues line without blocking; a full queue drops it.
func (s *sinkRunner) offer(line []byte) {
	select {
	case s.in <- line:
	default:
		s.dropped.Inc()
	}
}

// offerWait queues line, waiting for room until ctx ends (at Close, when
// flushing matters more than a prompt return).
func (s *sinkRunner) offerWait(ctx context.Context, line []byte) {
	select {
	case s.in <- line:
	case <-ctx.Done():
		s.dropped.Inc()
	}
}

// run writes batches until in is closed, writes the last one and closes
// the sink. ctx aborts writes in progress (Close's deadline passed).
func (s *sinkRunner) run(ctx context.Context) {
	defer close(s.done)
	defer s.closeSink()
	ticks, stop := s.batching.ticker()
	defer stop()
	for {
		select {
		case line, ok := <-s.in:
			if !ok {
				s.flush(ctx)
				return
			}
			s.add(ctx, line)
			if s.batching.Interval <= 0 && len(s.in) == 0 {
				s.flush(ctx)
			}
		case <-ticks:
			s.flush(ctx)
		}
	}
}

func (s *sinkRunner) add(ctx context.Context, line []byte) {
	if s.n > 0 && len(s.batch)+len(line) > s.batching.MaxBytes {
		s.flush(ctx)
	}
	s.batch = append(s.batch, line...)
	s.n++
	if s.n >= s.batching.MaxRecords || len(s.batch) >= s.batching.MaxBytes {
		s.flush(ctx)
	}
}

func (s *sinkRunner) flush(ctx context.Context) {
	if s.n == 0 {
		return
	}
	if err := s.sink.Write(ctx, s.batch); err != nil {
		s.errors.Inc()
		s.dropped.Add(float64(s.n))
	} else {
		s.bytes.Add(float64(len(s.batch)))
	}
	s.batch, s.n = s.batch[:0], 0
}

func (s *sinkRunner) closeSink() {
	if err := s.sink.Close(); err != nil {
		s.errors.Inc()
	}
}

// WriterSink is a sink writing to an io.Writer such as os.Stdout. It does
// not close the writer.
type WriterSink struct {
	name string
	w    io.Writer
}

// NewWriterSink writes to w under the metrics label name ("stdout" for
// os.Stdout).
func NewWriterSink(name string, w io.Writer) *WriterSink {
	return &WriterSink{name: name, w: w}
}

// Name implements Sink.
func (s *WriterSink) Name() string { return s.name }

// Batching implements Sink: whatever is queued, up to 64 KiB a write.
func (s *WriterSink) Batching() Batching {
	return Batching{MaxRecords: 1024, MaxBytes: 64 << 10}
}

// Write implements Sink.
func (s *WriterSink) Write(_ context.Context, batch []byte) error {
	_, err := s.w.Write(batch)
	return err
}

// Close implements Sink; the writer stays open.
func (s *WriterSink) Close() error { return nil }
