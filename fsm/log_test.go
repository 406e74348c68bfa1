package fsm

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestSlidingLogStateBounded is issue 13's amplification request: 1,000
// sliding_log items of limit 10,000 and cost 10,000 in one command. With
// one timestamp per unit it grew the heap by about 80 MB (150 MB of RSS on
// every replica); runs of (time, count) grow it by a few words per op.
func TestSlidingLogStateBounded(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Limit: MaxLogLimit, Period: time.Hour}
	cmd := &Command{Now: t0}
	for i := range 1000 {
		cmd.Ops = append(cmd.Ops, Op{Kind: OpTake, Key: fmt.Sprint("tenant\x00k", i), Limit: l, Cost: MaxLogLimit})
	}
	m := New(Config{})
	before := heapInUse()
	rs := m.Apply(cmd, nil)
	after := heapInUse()
	for i, r := range rs {
		if !r.Allowed {
			t.Fatalf("op %d: %+v", i, r)
		}
	}
	grew := int64(after) - int64(before)
	t.Logf("1,000 sliding_log takes of cost %d: heap %d -> %d bytes (+%d, %d per op)", MaxLogLimit, before, after, grew, grew/1000)
	if grew > 1<<20 {
		t.Fatalf("the heap grew by %d bytes for 1,000 ops: more than 1 KiB of state per op", grew)
	}
	runtime.KeepAlive(m)
	runtime.KeepAlive(cmd)
	runtime.KeepAlive(rs)
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSlidingLogBounds: a sliding log keeps its admissions for its period,
// so long periods and large limits are refused, with the package's errors
// (which the server answers with InvalidArgument), and change nothing.
func TestSlidingLogBounds(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		want error
	}{
		{Limit{Algorithm: SlidingLog, Limit: 10, Period: 366 * 24 * time.Hour}, ErrPeriod},
		{Limit{Algorithm: SlidingLog, Limit: 10, Period: MaxLogPeriod + time.Nanosecond}, ErrPeriod},
		{Limit{Algorithm: SlidingLog, Limit: MaxLogLimit + 1, Period: time.Second}, ErrLogTooLarge},
	} {
		m := New(Config{})
		r := m.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpTake, Key: "k", Limit: c.l, Cost: 1}}}, nil)[0]
		if !errors.Is(r.Err, c.want) || !errors.Is(c.l.Validate(), c.want) {
			t.Errorf("%+v: %v, want %v", c.l, r.Err, c.want)
		}
		if len(m.logs) != 0 {
			t.Errorf("%+v: a refused take left state", c.l)
		}
	}
	ok := Limit{Algorithm: SlidingLog, Limit: MaxLogLimit, Period: MaxLogPeriod}
	if err := ok.Validate(); err != nil {
		t.Fatalf("the largest sliding log is refused: %v", err)
	}
}
