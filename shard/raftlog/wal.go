package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Errors returned by this package.
var (
	// ErrClosed: the WAL has been closed.
	ErrClosed = errors.New("raftlog: closed")
	// ErrCorrupt: a segment holds bytes that are not a torn tail.
	ErrCorrupt = errCorrupt
)

// Options tune a WAL. Zero values take the defaults.
type Options struct {
	// SegmentSize is the size of a segment file (default 16 MiB). Segments
	// are written full of zeros before use, in the background, so that an
	// append changes no file metadata and its fdatasync flushes data only
	// (with appends that grow a file, every fdatasync also commits the
	// file system's journal, which several processes then wait on in
	// turn). Old segments are deleted whole, so smaller segments return
	// disk space sooner at the price of more files.
	SegmentSize int64
	// Observer is told about every write (optional).
	Observer Observer
	// Logf reports recovery events such as a truncated torn tail
	// (default: discarded).
	Logf func(format string, args ...any)
}

// Observer is told about each group commit; the node turns these into
// metrics.
type Observer interface {
	// Synced is called after one write and fdatasync that carried records
	// from the groups' appends and deletions, bytes long, taking d.
	Synced(records, bytes int, d time.Duration)
}

// queueLen bounds the records waiting for the writer. Each caller is one of
// a group's raft goroutines waiting for its own record, so the queue holds
// at most a few records per group; callers beyond it wait to enqueue.
const queueLen = 4096

// WAL is a node's write-ahead log, shared by its Raft groups. One goroutine
// (run) owns the current segment and all writes; the index of every group
// and the open segment files are guarded by mu.
type WAL struct {
	dir  string
	opts Options

	qmu    sync.RWMutex // held to enqueue; Close takes it to close queue
	closed bool         // guarded by qmu
	queue  chan *pending
	done   chan struct{}

	mu struct {
		sync.RWMutex
		groups map[string]*index
		segs   map[uint32]*os.File
		err    error // sticky: a failed write or sync breaks the WAL
	}

	// Owned by run.
	cur     *os.File
	curID   uint32
	curSize int64 // bytes of frames in cur; zeros follow
	buf     []byte
	next    chan prepared // the next segment, zeroed in the background

	syncs atomic.Uint64

	// midWrite, set by tests only, is called between the two halves of a
	// write, so that a process can be killed inside one.
	midWrite func()
}

// pending is one record waiting for the writer.
type pending struct {
	group string
	frame []byte
	kind  byte
	first uint64 // append: the first entry's index
	spans []span // append: each entry within frame
	min   uint64 // delete
	max   uint64
	done  chan error
}

// index says where each live entry of one group lies: locs[i] is entry
// first+i.
type index struct {
	first uint64
	locs  []loc
}

type loc struct{ seg, off, n uint32 }

// prepared is a zero-filled segment ready to become the current one.
type prepared struct {
	id  uint32
	f   *os.File
	err error
}

// Open opens the WAL in dir, creating it if needed, and replays it.
func Open(dir string, opts Options) (*WAL, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = 16 << 20
	}
	// Offsets within a segment are 32-bit; a segment may overrun its size
	// by one group commit (maxWrite plus one frame).
	opts.SegmentSize = min(opts.SegmentSize, 1<<30)
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	w := &WAL{dir: dir, opts: opts, queue: make(chan *pending, queueLen), done: make(chan struct{})}
	w.mu.groups = map[string]*index{}
	w.mu.segs = map[uint32]*os.File{}
	if err := w.recover(); err != nil {
		w.closeFiles()
		return nil, err
	}
	go w.run()
	return w, nil
}

func segmentName(id uint32) string { return fmt.Sprintf("%08x.wal", id) }

// segmentIDs lists the segment files in dir, oldest first.
func segmentIDs(dir string) ([]uint32, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	var ids []uint32
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".wal")
		if !ok || e.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 32)
		if err != nil || len(name) != 8 {
			continue
		}
		ids = append(ids, uint32(id))
	}
	slices.Sort(ids)
	return ids, nil
}

// recover replays every segment, truncates a torn tail of the last one and
// makes it the current segment (or creates the first).
func (w *WAL) recover() error {
	ids, err := segmentIDs(w.dir)
	if err != nil {
		return err
	}
	// A segment being zeroed when the process stopped.
	tmps, _ := filepath.Glob(filepath.Join(w.dir, "*.wal.tmp"))
	for _, t := range tmps {
		os.Remove(t)
	}
	// Segments after the last one written to are zeroed and unused; the
	// torn tail a crash may leave is in the last one written to.
	lastUsed := len(ids) - 1
	for lastUsed > 0 && unused(filepath.Join(w.dir, segmentName(ids[lastUsed]))) {
		lastUsed--
	}
	for i, id := range ids {
		last := i >= lastUsed
		f, err := os.OpenFile(filepath.Join(w.dir, segmentName(id)), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("raftlog: %w", err)
		}
		w.mu.segs[id] = f
		size, err := w.replay(f, id, last)
		if err != nil {
			return err
		}
		if i == len(ids)-1 {
			w.cur, w.curID, w.curSize = f, id, size
		}
	}
	if w.cur == nil {
		if err := w.install(prepareSegment(w.dir, 1, w.opts.SegmentSize)); err != nil {
			return err
		}
	}
	w.prepareNext()
	return nil
}

// replay applies segment id's frames to the groups' indexes and returns
// the size of its intact prefix. A bad tail of the last segment is
// truncated away; elsewhere it is an error.
func (w *WAL) replay(f *os.File, id uint32, last bool) (int64, error) {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, fmt.Errorf("raftlog: %w", err)
	}
	off := 0
	for off < len(b) {
		rec, n, ok, err := readFrame(b[off:])
		if err != nil {
			return 0, fmt.Errorf("raftlog: segment %s at offset %d: %w", segmentName(id), off, err)
		}
		if !ok {
			break
		}
		w.apply(rec, id, uint32(off))
		off += n
	}
	tail := b[off:]
	if allZero(tail) {
		return int64(off), nil // the unused, zeroed rest of the segment
	}
	if !last {
		return 0, fmt.Errorf("%w: segment %s is damaged at offset %d of %d, and it is not the last segment", ErrCorrupt, segmentName(id), off, len(b))
	}
	// Zero the torn bytes rather than truncating, so the segment stays
	// allocated and the next frame goes where the torn one began.
	w.opts.Logf("raftlog: segment %s: clearing a torn tail at offset %d (a write the crash interrupted, never acknowledged)", segmentName(id), off)
	end := len(tail)
	for end > 0 && tail[end-1] == 0 {
		end--
	}
	if _, err := f.WriteAt(make([]byte, end), int64(off)); err != nil {
		return 0, fmt.Errorf("raftlog: clearing torn tail: %w", err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("raftlog: %w", err)
	}
	return int64(off), nil
}

// unused reports whether the segment at path has no frame: its first
// header is zeros (or it is empty).
func unused(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, frameHeader)
	n, _ := f.ReadAt(b, 0)
	return allZero(b[:n])
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// apply changes the indexes for one record written at (seg, off). Live
// writes and replay share it, so replay ends where the live WAL was.
// Callers hold mu or own the WAL exclusively.
func (w *WAL) apply(rec record, seg, off uint32) {
	ix := w.mu.groups[rec.group]
	if ix == nil {
		ix = &index{}
		w.mu.groups[rec.group] = ix
	}
	switch rec.kind {
	case kindAppend:
		locs := make([]loc, len(rec.spans))
		for i, s := range rec.spans {
			locs[i] = loc{seg: seg, off: off + s.off, n: s.n}
		}
		ix.append(rec.first, locs)
	case kindDelete:
		ix.deleteRange(rec.min, rec.max)
	}
}

func (ix *index) last() uint64 {
	if len(ix.locs) == 0 {
		return 0
	}
	return ix.first + uint64(len(ix.locs)) - 1
}

// append adds entries first.. to the index. Entries at or above first are
// replaced; a gap, or a start below the first entry, restarts the log.
func (ix *index) append(first uint64, locs []loc) {
	switch {
	case len(ix.locs) == 0 || first < ix.first || first > ix.last()+1:
		ix.first, ix.locs = first, append(ix.locs[:0:0], locs...)
	default:
		ix.locs = append(ix.locs[:first-ix.first], locs...)
	}
}

// deleteRange drops entries min..max. Raft deletes a prefix (compaction)
// or a suffix (a conflicting tail); a range inside the log drops the suffix
// from min, as raft never asks for that and keeping a hole would break the
// consecutive indexes that locs relies on.
func (ix *index) deleteRange(min, max uint64) {
	if len(ix.locs) == 0 || max < ix.first || min > ix.last() || min > max {
		return
	}
	if min <= ix.first {
		if max >= ix.last() {
			ix.locs = nil
			return
		}
		drop := max - ix.first + 1
		ix.locs = ix.locs[drop:]
		ix.first = max + 1
		if cap(ix.locs) > 2*len(ix.locs)+1024 {
			ix.locs = slices.Clone(ix.locs) // let the dropped prefix go
		}
		return
	}
	ix.locs = ix.locs[:min-ix.first]
}

// submit hands a record to the writer and waits until it is durable.
func (w *WAL) submit(p *pending) error {
	p.done = make(chan error, 1)
	w.qmu.RLock()
	if w.closed {
		w.qmu.RUnlock()
		return ErrClosed
	}
	w.queue <- p
	w.qmu.RUnlock()
	return <-p.done
}

// maxWrite bounds the bytes one group commit gathers, so one fsync does not
// wait for an unbounded write.
const maxWrite = 16 << 20

// run is the writer: it takes every record queued, writes them with one
// write call and one fdatasync, updates the indexes and answers.
func (w *WAL) run() {
	defer close(w.done)
	var batch []*pending
	for p := range w.queue {
		batch = append(batch[:0], p)
		size := len(p.frame)
	gather:
		for size < maxWrite {
			select {
			case q, ok := <-w.queue:
				if !ok {
					break gather
				}
				batch = append(batch, q)
				size += len(q.frame)
			default:
				break gather
			}
		}
		err := w.write(batch)
		for _, p := range batch {
			p.done <- err
		}
		clear(batch)
	}
}

// write makes batch durable in the current segment (rotating first when it
// is full) and applies it to the indexes.
func (w *WAL) write(batch []*pending) error {
	w.mu.RLock()
	err := w.mu.err
	w.mu.RUnlock()
	if err != nil {
		return err
	}
	size := 0
	for _, p := range batch {
		size += len(p.frame)
	}
	if w.curSize > 0 && w.curSize+int64(size) > w.opts.SegmentSize {
		if err := w.install(<-w.next); err != nil {
			return w.fail(err)
		}
		w.prepareNext()
	}
	start := time.Now()
	w.buf = w.buf[:0]
	for _, p := range batch {
		w.buf = append(w.buf, p.frame...)
	}
	if err := w.writeBuf(len(batch[len(batch)-1].frame)); err != nil {
		return w.fail(err)
	}
	if err := fdatasync(w.cur); err != nil {
		return w.fail(err)
	}
	w.syncs.Add(1)
	off := w.curSize
	w.curSize += int64(size)
	deleted := false
	w.mu.Lock()
	for _, p := range batch {
		w.apply(record{kind: p.kind, group: p.group, first: p.first, spans: p.spans, min: p.min, max: p.max}, w.curID, uint32(off))
		off += int64(len(p.frame))
		deleted = deleted || p.kind == kindDelete
	}
	var old map[uint32]*os.File
	if deleted {
		old = w.releaseLocked()
	}
	w.mu.Unlock()
	for id, f := range old {
		f.Close()
		os.Remove(filepath.Join(w.dir, segmentName(id)))
	}
	if o := w.opts.Observer; o != nil {
		o.Synced(len(batch), size, time.Since(start))
	}
	return nil
}

// writeBuf writes buf at the end of the current segment; lastFrame is the
// size of its last frame.
func (w *WAL) writeBuf(lastFrame int) error {
	b := w.buf
	if w.midWrite != nil {
		cut := len(b) - lastFrame/2 // inside the last frame
		if _, err := w.cur.WriteAt(b[:cut], w.curSize); err != nil {
			return err
		}
		w.midWrite()
		_, err := w.cur.WriteAt(b[cut:], w.curSize+int64(cut))
		return err
	}
	_, err := w.cur.WriteAt(b, w.curSize)
	return err
}

// fail makes err sticky: after a failed write or fsync the file's state is
// unknown (a retried fsync can report success for lost pages), so the WAL
// refuses everything from then on and the node must restart and replay.
func (w *WAL) fail(err error) error {
	err = fmt.Errorf("raftlog: write failed, the log refuses further writes until restart: %w", err)
	w.mu.Lock()
	if w.mu.err == nil {
		w.mu.err = err
	}
	w.mu.Unlock()
	return err
}

// releaseLocked removes from the table the segments older than any live
// entry and returns them for closing and deletion. The current segment is
// never released.
func (w *WAL) releaseLocked() map[uint32]*os.File {
	keep := w.curID
	for _, ix := range w.mu.groups {
		if len(ix.locs) > 0 {
			keep = min(keep, ix.locs[0].seg)
		}
	}
	old := map[uint32]*os.File{}
	for id, f := range w.mu.segs {
		if id < keep {
			old[id] = f
			delete(w.mu.segs, id)
		}
	}
	return old
}

// install makes a prepared segment the current one.
func (w *WAL) install(p prepared) error {
	if p.err != nil {
		return p.err
	}
	w.mu.Lock()
	w.mu.segs[p.id] = p.f
	w.mu.Unlock()
	w.cur, w.curID, w.curSize = p.f, p.id, 0
	return nil
}

// prepareNext zeroes the segment after the current one in the background.
func (w *WAL) prepareNext() {
	w.next = make(chan prepared, 1)
	go func(id uint32, ch chan<- prepared) {
		ch <- prepareSegment(w.dir, id, w.opts.SegmentSize)
	}(w.curID+1, w.next)
}

// prepareSegment writes segment id full of zeros under a temporary name,
// syncs it, and renames it into place.
func prepareSegment(dir string, id uint32, size int64) prepared {
	path := filepath.Join(dir, segmentName(id))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return prepared{err: fmt.Errorf("raftlog: new segment: %w", err)}
	}
	fail := func(err error) prepared {
		f.Close()
		os.Remove(tmp)
		return prepared{err: fmt.Errorf("raftlog: new segment: %w", err)}
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			return fail(err)
		}
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return prepared{id: id, f: f}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("raftlog: syncing %s: %w", dir, err)
	}
	return nil
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// Syncs is the number of fdatasyncs since Open: with Records, how many
// records one sync carried on average.
func (w *WAL) Syncs() uint64 { return w.syncs.Load() }

// Segments is the number of segment files the WAL holds.
func (w *WAL) Segments() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return len(w.mu.segs)
}

// Close waits for queued records, then closes the files. Calls after Close
// fail with ErrClosed.
func (w *WAL) Close() error {
	w.qmu.Lock()
	if w.closed {
		w.qmu.Unlock()
		return nil
	}
	w.closed = true
	close(w.queue)
	w.qmu.Unlock()
	<-w.done
	if p := <-w.next; p.f != nil {
		p.f.Close() // ready for the next Open, which takes it as it is
	}
	return w.closeFiles()
}

func (w *WAL) closeFiles() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	for id, f := range w.mu.segs {
		err = errors.Join(err, f.Close())
		delete(w.mu.segs, id)
	}
	return err
}
