package decide

import (
	"context"
	"time"
)

// Recorder receives every request the engine decided (dry runs are not
// decisions): the decision log, top keys and recent events are kept from
// it. It runs on the check's goroutine after the answer is built, so it
// must be cheap and must never block; it must not keep the Request or the
// Answer past the call (copy what it keeps).
type Recorder interface {
	Decided(ctx context.Context, d *Decided)
}

// Decided is one decided request as a Recorder sees it.
type Decided struct {
	Request *Request
	Answer  *Answer
	// Mode is how its buckets were decided: "strict", "leased", "mixed",
	// or "policy" when no bucket was (a block, or no policy matched).
	Mode string
	// At is when the engine began deciding it; Took how long it took.
	At   time.Time
	Took time.Duration
}

type nopRecorder struct{}

func (nopRecorder) Decided(context.Context, *Decided) {}

// record hands a decided request to the recorder.
func (e *Engine) record(ctx context.Context, req *Request, ans *Answer, mode string, start time.Time, took time.Duration) {
	if req.DryRun {
		return
	}
	e.rec.Decided(ctx, &Decided{Request: req, Answer: ans, Mode: mode, At: start, Took: took})
}
