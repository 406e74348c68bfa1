package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The filler keeps the shards busy with bursts of strict checks on keys of
// its own, so that the checked keys' requests share log entries with other
// requests: a batcher that handed a reply to the wrong request would then
// show, in the checked keys' histories and in the filler's own answers
// (each filler key has a capacity no other key has, and every answer
// names the capacity it was decided against). The paced checked clients
// alone almost never meet in one entry: a shard proposes at once while its
// pipeline has room.
const (
	fillerBurst = 32                    // concurrent checks, on as many keys
	fillerPause = 40 * time.Millisecond // between bursts
	fillerBase  = 1_000_000             // capacity of filler key 0
)

// filler counts what its checks saw.
type filler struct {
	tag string // keeps one run's keys apart from another's

	mu                   sync.Mutex
	ops, decided, misfit int
	firstMisfit          string
}

// run sends bursts until ctx ends, each burst through the next node.
func (f *filler) run(ctx context.Context, c *cluster, entries *entryLog) {
	conns := make([]*client.Client, len(c.agents))
	for i, a := range c.agents {
		cl, err := client.Dial(a.rpc(), c.dialOpts...)
		if err != nil {
			return // only a malformed address fails here
		}
		conns[i] = cl
		defer cl.Close()
	}
	for round := 0; ctx.Err() == nil; round++ {
		cl := conns[round%len(conns)]
		var wg sync.WaitGroup
		for j := range fillerBurst {
			wg.Go(func() { f.check(ctx, cl, j, entries) })
		}
		wg.Wait()
		sleep(ctx, fillerPause)
	}
}

// check makes one strict check of filler key j and judges its answer.
func (f *filler) check(ctx context.Context, cl *client.Client, j int, entries *entryLog) {
	capacity := int64(fillerBase + j)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := cl.Check(cctx, &pb.CheckRequest{Mode: pb.Mode_MODE_STRICT, Items: []*pb.Item{{
		Name: "chaos-filler", Key: fmt.Sprintf("filler-%d/%s", j, f.tag), Algorithm: pb.Algorithm_ALGORITHM_TOKEN_BUCKET,
		Limit: capacity, Period: durationpb.New(time.Second), Cost: 1, Fail: pb.FailMode_FAIL_MODE_CLOSED,
	}}})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if err != nil || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetIndex() == 0 {
		return // not decided in the log: nothing to judge
	}
	it := resp.GetResults()[0]
	f.decided++
	entries.add(it.GetShard(), it.GetIndex(), false)
	if it.GetLimit() != capacity {
		f.misfit++
		if f.firstMisfit == "" {
			f.firstMisfit = fmt.Sprintf("filler key %d (capacity %d) got an answer for capacity %d (shard %d, entry %d)",
				j, capacity, it.GetLimit(), it.GetShard(), it.GetIndex())
		}
	}
}

// entryID names one log entry.
type entryID struct {
	shard int64
	index uint64
}

// entryUse is what one entry carried, as far as the clients saw.
type entryUse struct{ checked, others int }

// entryLog records which decided requests shared a log entry.
type entryLog struct {
	mu sync.Mutex
	m  map[entryID]entryUse
}

func (l *entryLog) add(shard int64, index uint64, checked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.m[entryID{shard, index}]
	if checked {
		u.checked++
	} else {
		u.others++
	}
	l.m[entryID{shard, index}] = u
}

// shared counts the entries that carried more than one request, and among
// them those that carried a checked key's request with another.
func (l *entryLog) shared() (entries, multi, checkedShared int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range l.m {
		entries++
		if u.checked+u.others > 1 {
			multi++
			if u.checked > 0 {
				checkedShared++
			}
		}
	}
	return entries, multi, checkedShared
}
