package ui

import (
	"context"
	"errors"
	"sync"
	"time"
)

// reuseFor is how long an answer serves further requests: each open page
// asks once a second, and every ask is a fan-out to all peers, so pages
// beyond the first must cost the cluster nothing.
const reuseFor = 500 * time.Millisecond

// fetcher shares one Source call among the requests that arrive while it
// runs, and its answer among those that arrive within reuseFor after it.
type fetcher struct {
	src Source
	now func() time.Time

	mu struct {
		sync.Mutex
		call *call     // the call under way, nil if none
		last *Overview // the last answer, nil before the first
		at   time.Time // when last arrived
	}
}

// call is one Source call; ov and err are written before done is closed.
type call struct {
	done   chan struct{}
	ov     *Overview
	err    error
	joined int // callers waiting on it; guarded by fetcher.mu
}

func newFetcher(src Source, now func() time.Time) *fetcher {
	return &fetcher{src: src, now: now}
}

// get answers with the current overview, or ctx's error if the caller
// stops waiting first (the shared call goes on for the others).
func (f *fetcher) get(ctx context.Context) (*Overview, error) {
	f.mu.Lock()
	if f.mu.last != nil && f.now().Sub(f.mu.at) < reuseFor {
		ov := f.mu.last
		f.mu.Unlock()
		return ov, nil
	}
	c := f.mu.call
	if c == nil {
		c = &call{done: make(chan struct{})}
		f.mu.call = c
		go f.run(c)
	}
	c.joined++
	f.mu.Unlock()
	select {
	case <-c.done:
		return c.ov, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run makes the call on a context of its own: the request that started it
// may leave, and the others still want the answer.
func (f *fetcher) run(c *call) {
	ctx, cancel := context.WithTimeout(context.Background(), overviewTimeout)
	defer cancel()
	c.ov, c.err = f.src.Overview(ctx)
	if c.err == nil && c.ov == nil {
		c.err = errors.New("the source gave no overview and no error")
	}
	f.mu.Lock()
	f.mu.call = nil
	if c.err == nil {
		f.mu.last, f.mu.at = c.ov, f.now()
	}
	f.mu.Unlock()
	close(c.done)
}
