// Package progress shows quorate bench's progress on a terminal: a bar per
// run with its elapsed time and live throughput (requests, checks and
// errors per second over the last second), drawn with
// github.com/vbauerster/mpb. When the output is not a terminal it prints one
// line per finished run instead, and in quiet mode nothing at all.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/quorate/quorate/bench"
)

// Display writes progress to a writer, normally stderr, so that a run's
// table on stdout stays clean for pipes.
type Display struct {
	w     io.Writer
	tty   bool
	quiet bool
	mu    sync.Mutex // serializes Printf lines
}

// New returns a display on w; quiet turns it off.
func New(w io.Writer, quiet bool) *Display {
	return &Display{w: w, tty: isTerminal(w), quiet: quiet}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Printf writes a status line (unless quiet).
func (d *Display) Printf(format string, args ...any) {
	if d.quiet {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, format, args...)
}

// refresh is how often the bar and its rates update.
const refresh = 200 * time.Millisecond

// Track shows the progress of one run until the returned function is called.
func (d *Display) Track(label string, load bench.Load, live *bench.Live) (done func()) {
	if d.quiet {
		return func() {}
	}
	start := time.Now()
	if !d.tty {
		return func() {
			req, checks, errs := live.Snapshot()
			el := time.Since(start)
			d.Printf("%s: %d requests, %d checks in %.1fs (%.0f req/s, %.0f checks/s), %d errors\n",
				label, req, checks, el.Seconds(), float64(req)/el.Seconds(), float64(checks)/el.Seconds(), errs)
		}
	}
	// Progress is time for a timed run, requests otherwise.
	total, byTime := load.Requests, load.Duration > 0
	if byTime {
		total = load.Duration.Milliseconds()
	}
	p := mpb.New(mpb.WithOutput(d.w), mpb.WithWidth(32), mpb.WithRefreshRate(refresh))
	r := &rates{}
	bar := p.AddBar(total,
		mpb.PrependDecorators(decor.Name(label, decor.WC{W: len(label) + 1, C: decor.DindentRight})),
		mpb.AppendDecorators(
			decor.Elapsed(decor.ET_STYLE_GO, decor.WC{W: 6}),
			decor.Any(func(decor.Statistics) string { return r.String() }, decor.WC{W: 48}),
		),
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(refresh)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				req, checks, errs := live.Snapshot()
				r.sample(now, req, checks, errs)
				if byTime {
					bar.SetCurrent(min(total, now.Sub(start).Milliseconds()))
				} else {
					bar.SetCurrent(min(total, req))
				}
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
		bar.SetTotal(-1, true) // complete at whatever was reached
		p.Wait()
	}
}

// rates turns running totals into per-second rates over the last second.
type rates struct {
	mu      sync.Mutex
	samples []sample // the last second's, oldest first
	text    string
}

type sample struct {
	at                  time.Time
	req, checks, errors int64
}

func (r *rates) sample(now time.Time, req, checks, errs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, sample{now, req, checks, errs})
	for len(r.samples) > 2 && now.Sub(r.samples[1].at) >= time.Second {
		r.samples = r.samples[1:]
	}
	first := r.samples[0]
	dt := now.Sub(first.at).Seconds()
	if dt <= 0 {
		return
	}
	r.text = fmt.Sprintf("%7.0f req/s %8.0f checks/s %5.0f err/s",
		float64(req-first.req)/dt, float64(checks-first.checks)/dt, float64(errs-first.errors)/dt)
}

func (r *rates) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.text
}
