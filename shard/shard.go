package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
)

// Config describes a shard: its Raft group plus the batcher's settings.
// Zero values take the defaults.
type Config struct {
	GroupConfig
	FSM fsm.Config
	// BatchMax caps the operations in one command (default 1024).
	BatchMax int
	// BatchWait is how long the batcher may wait for more operations once
	// it has some, when the previous batch carried more than one request
	// (default 0: no deliberate wait). Adaptive: a lightly loaded shard
	// proposes each request at once and adds no latency; under load,
	// waiting lets each command carry more checks per entry, fsync and
	// AppendEntries, which is what a strict check's CPU is mostly spent on.
	BatchWait time.Duration
	// MaxInflight caps the commands proposed but not yet applied (default 4).
	// While the pipeline is full, new operations queue and join the next
	// batch: the higher the load, the bigger the batches.
	MaxInflight int
	// TickInterval is how long an idle leader waits before committing an
	// empty command to move the machine's clock (default 15s: a quarter of
	// fsm's default MaxClockJump, so an idle group's clock never needs a
	// jump the machine would clamp; every tick is a replicated, fsync'd
	// entry on each replica, which an idle node should not pay each second).
	TickInterval time.Duration
	// Clock stamps commands (default time.Now).
	Clock func() time.Time
	// QueueLen bounds the requests waiting for the batcher (default
	// 4 × BatchMax). A Submit that finds the queue full waits for a place
	// until its context ends; an Observer that is also a QueueObserver
	// hears of both.
	QueueLen int
	// Observer receives batch and commit measurements (optional).
	Observer Observer
}

// Observer is told about each proposed batch; the cluster turns these into
// metrics.
type Observer interface {
	// Batch is called when a command of ops operations is committed, with
	// the time from proposal to application.
	Batch(ops int, commit time.Duration)
}

// QueueObserver is told when a Submit finds the batcher's queue full: shed
// reports whether it gave up (its context ended, or the shard closed)
// before a place was free, rather than waited for one.
type QueueObserver interface {
	QueueFull(shed bool)
}

func (c *Config) setDefaults() {
	if c.BatchMax <= 0 {
		c.BatchMax = 1024
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 4 * c.BatchMax
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 4
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 15 * time.Second
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

// Shard is a Group whose state machine is an fsm.Machine, with the leader's
// batcher in front of it.
type Shard struct {
	*Group
	fsm  *machineFSM
	cfg  Config
	in   chan *request
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	// proposing counts the proposals whose outcome is awaited: Close
	// lets them end before raft shuts down (see Close).
	proposing sync.WaitGroup
}

// Applied is the outcome of one Submit.
type Applied struct {
	Results []fsm.Result
	Index   uint64 // the log entry that carried the operations
	Now     int64  // the machine's time when it applied them (Unix ns)
}

type request struct {
	ops    []fsm.Op
	atomic bool
	reply  chan reply
}

type reply struct {
	Applied
	err error
}

// Open opens the shard's group and starts its batcher.
func Open(cfg Config) (*Shard, error) {
	cfg.setDefaults()
	mf := &machineFSM{m: fsm.New(cfg.FSM)}
	g, err := OpenGroup(cfg.GroupConfig, mf)
	if err != nil {
		return nil, err
	}
	s := &Shard{Group: g, fsm: mf, cfg: cfg, in: make(chan *request, cfg.QueueLen), stop: make(chan struct{})}
	s.wg.Add(1)
	go s.run()
	return s, nil
}

// Submit applies ops through the group's log, on the leader, and returns
// their results. With atomic set, the ops are all-or-nothing (fsm.Op.Group).
// ErrNotLeader means nothing was applied; ErrOutcomeUnknown and a context
// error after submission mean the ops may or may not have been applied.
func (s *Shard) Submit(ctx context.Context, ops []fsm.Op, atomic bool) (Applied, error) {
	if !s.IsLeader() {
		return Applied{}, ErrNotLeader
	}
	if len(ops) > s.cfg.BatchMax {
		return Applied{}, fmt.Errorf("shard %s: %d operations exceed the batch limit %d", s.id, len(ops), s.cfg.BatchMax)
	}
	req := &request{ops: ops, atomic: atomic, reply: make(chan reply, 1)}
	select {
	case s.in <- req:
	default:
		if err := s.enqueueFull(ctx, req); err != nil {
			return Applied{}, err
		}
	}
	select {
	case r := <-req.reply:
		return r.Applied, r.err
	case <-ctx.Done():
		return Applied{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

// Control applies a control entry (a split's fence, adopt or release)
// through the group's log, on the leader, and returns the entry's index and
// fsm.Machine.ApplyControl's error. It is proposed at once, not batched
// with ops. ErrNotLeader means nothing was applied; ErrOutcomeUnknown and
// a context error mean it may or may not have been (control entries are
// idempotent: retry).
func (s *Shard) Control(ctx context.Context, c *fsm.Control) (index uint64, err error) {
	if !s.IsLeader() {
		return 0, ErrNotLeader
	}
	f := s.raft.Apply(fsm.AppendControl(nil, c), 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Error() // returns once applied, refused or shut down
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
	if err := f.Error(); err != nil {
		return 0, translate(err)
	}
	a, _ := f.Response().(*applied)
	if a == nil {
		return 0, fmt.Errorf("shard %s: no result for entry %d", s.id, f.Index())
	}
	return a.index, a.err
}

// SplitInfo returns the split state of this replica's machine.
func (s *Shard) SplitInfo() fsm.SplitInfo { return s.fsm.split() }

// ExportChunk returns chunk seq of this replica's frozen copy of a fenced
// range (fsm.Machine.ExportChunk), and whether it is the last. Any replica
// that applied the fence exports the same chunks.
func (s *Shard) ExportChunk(seq uint64) ([]byte, bool, error) {
	return s.fsm.exportChunk(seq)
}

// enqueueFull waits for a place in the full queue, and tells the observer
// whether it got one.
func (s *Shard) enqueueFull(ctx context.Context, req *request) error {
	var err error
	select {
	case s.in <- req:
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.stop:
		err = ErrClosed
	}
	if o, ok := s.cfg.Observer.(QueueObserver); ok {
		o.QueueFull(err != nil)
	}
	return err
}

// run is the batcher: one goroutine owns batching; each proposed command is
// awaited by its own goroutine so the batcher never blocks on a commit.
func (s *Shard) run() {
	defer s.wg.Done()
	slots := make(chan struct{}, s.cfg.MaxInflight)
	tick := time.NewTicker(s.cfg.TickInterval)
	defer tick.Stop()
	last := time.Now()
	busy := false      // the previous batch carried more than one request
	var first *request // when set before the wait: too big for the last batch
	for {
		if first == nil {
			select {
			case first = <-s.in:
			case <-tick.C:
				if s.IsLeader() && time.Since(last) >= s.cfg.TickInterval {
					slots <- struct{}{}
					s.propose(nil, slots)
					last = time.Now()
				}
				continue
			case <-s.stop:
				return
			}
		}
		select {
		case slots <- struct{}{}:
		case <-s.stop:
			first.reply <- reply{err: ErrClosed}
			return
		}
		var batch []*request
		batch, first = s.gather(first, busy)
		busy = len(batch) > 1
		s.propose(batch, slots)
		last = time.Now()
	}
}

// fullEnough is the operations past which a batch stops waiting for more:
// the per-entry costs (fsyncs, AppendEntries, wake-ups) are already spread
// thin, and waiting longer would only add latency.
const fullEnough = 64

// gather collects the requests queued behind first, up to BatchMax ops,
// waiting up to BatchWait for more while busy (the previous batch carried
// more than one request) and the batch is not yet fullEnough. A request
// too big to join is returned as carry, to start the next batch: putting it
// back in the queue could block the batcher behind Submits that filled it.
func (s *Shard) gather(first *request, busy bool) (batch []*request, carry *request) {
	batch, n := []*request{first}, len(first.ops)
	var timeout <-chan time.Time
	if s.cfg.BatchWait > 0 && busy {
		t := time.NewTimer(s.cfg.BatchWait)
		defer t.Stop()
		timeout = t.C
	}
	for n < s.cfg.BatchMax {
		var r *request
		select {
		case r = <-s.in:
		default:
			if timeout == nil || n >= fullEnough {
				return batch, nil
			}
			select {
			case r = <-s.in:
			case <-timeout:
				return batch, nil
			}
		}
		if n+len(r.ops) > s.cfg.BatchMax {
			return batch, r
		}
		batch, n = append(batch, r), n+len(r.ops)
	}
	return batch, nil
}

// propose encodes the batch as one command stamped with the leader's clock
// and hands it to raft; a goroutine awaits the commit and answers each
// request with its slice of the results.
func (s *Shard) propose(batch []*request, slots chan struct{}) {
	cmd := fsm.Command{Now: s.cfg.Clock().UnixNano()}
	for i, r := range batch {
		start := len(cmd.Ops)
		cmd.Ops = append(cmd.Ops, r.ops...)
		if r.atomic {
			for j := start; j < len(cmd.Ops); j++ {
				cmd.Ops[j].Group = uint32(i + 1)
			}
		}
	}
	began := time.Now()
	f := s.raft.Apply(fsm.AppendCommand(nil, &cmd), 0)
	s.proposing.Add(1)
	go func() {
		defer s.proposing.Done()
		defer func() { <-slots }()
		err := f.Error()
		var a *applied
		if err == nil {
			a, _ = f.Response().(*applied)
			if a == nil {
				err = fmt.Errorf("shard %s: no result for entry %d", s.id, f.Index())
			} else if a.err != nil {
				err = a.err
			}
		}
		if err == nil && s.cfg.Observer != nil && len(cmd.Ops) > 0 {
			s.cfg.Observer.Batch(len(cmd.Ops), time.Since(began))
		}
		err = translate(err)
		off := 0
		for _, r := range batch {
			rep := reply{err: err}
			if err == nil {
				rep.Applied = Applied{Results: a.results[off : off+len(r.ops)], Index: a.index, Now: a.now}
			}
			off += len(r.ops)
			r.reply <- rep
		}
	}()
}

func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNotLeader // not appended: safe to retry elsewhere
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	}
	return err
}

// closeDrain bounds how long Close waits for the proposals in flight.
const closeDrain = 5 * time.Second

// Close stops the batcher, failing queued requests, lets the proposals in
// flight end (committed, or failed once leadership is lost), at most
// closeDrain, and closes the group. hashicorp/raft never answers a
// proposal still in its queue when it shuts down: its waiter would wait
// for good.
func (s *Shard) Close() error {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	drained := make(chan struct{})
	go func() { s.proposing.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(closeDrain):
	}
	for {
		select {
		case r := <-s.in:
			r.reply <- reply{err: ErrClosed}
		default:
			return s.Group.Close()
		}
	}
}
