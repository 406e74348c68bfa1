package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/chaos/check"
	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// callTimeout is each check's deadline. A check that misses it is Unknown.
const callTimeout = 1500 * time.Millisecond

// keySpec is one bucket of the workload.
type keySpec struct {
	name  string
	limit fsm.Limit
}

func tb(limit int64, period time.Duration, burst int64) fsm.Limit {
	return fsm.Limit{Algorithm: fsm.TokenBucket, Limit: limit, Period: period, Burst: burst}
}

// The workload's keys. Strict keys have short periods, which exercise
// refill across faults, and long ones (1h), which drain early and then
// must stay drained: lost state would show as an ALLOW. Leased keys likewise.
var (
	strictSpecs = []keySpec{
		{"strict-a", tb(5, time.Second, 0)},
		{"strict-b", tb(10, 2*time.Second, 15)},
		{"strict-c", tb(2, 500*time.Millisecond, 0)},
		{"strict-d", tb(20, 10*time.Second, 0)},
		{"strict-1h-a", tb(30, time.Hour, 0)},
		{"strict-1h-b", tb(100, time.Hour, 0)},
	}
	leasedSpecs = []keySpec{
		{"leased-a", tb(200, time.Second, 0)},
		{"leased-b", tb(1000, 10*time.Second, 0)},
		{"leased-1h", tb(500, time.Hour, 0)},
	}
)

// strictKey is a strict bucket and its history.
type strictKey struct {
	keySpec
	key string // the bucket key sent: name plus the run's tag, so it is fresh
	rec check.Recorder
}

// leasedKey is a leased bucket and its allows. Fields after mu are guarded by it.
type leasedKey struct {
	keySpec
	key string

	mu                  sync.Mutex
	first               int64  // Unix ns of the earliest call, 0 before any
	allows              []span // client call and return of every ALLOW
	denied, unavailable int
	unknown             int
}

type span struct{ Call, Return int64 }

// workload runs clients against a cluster and records what they saw.
type workload struct {
	c     *cluster
	seed  uint64
	guard *guard
	// leasedPause bounds the pause between a leased client's checks.
	leasedPause time.Duration
	strict      []*strictKey
	leased      []*leasedKey

	mu sync.Mutex // guards the success times below
	ok map[pb.Mode][]int64

	fill    filler
	entries entryLog
}

func newWorkload(c *cluster, seed uint64, tag string, g *guard) *workload {
	w := &workload{c: c, seed: seed, guard: g, ok: map[pb.Mode][]int64{}, fill: filler{tag: tag}, entries: entryLog{m: map[entryID]entryUse{}}}
	for _, s := range strictSpecs {
		w.strict = append(w.strict, &strictKey{keySpec: s, key: s.name + "/" + tag})
	}
	for _, s := range leasedSpecs {
		w.leased = append(w.leased, &leasedKey{keySpec: s, key: s.name + "/" + tag})
	}
	return w
}

// item is a check of key under limit name: strict and leased keys use
// different names, as an application would for limits it checks in
// different modes. Leased checks make the nodes take credits for their
// name, which start that name's fresh buckets a few units low (see
// docs/design.md); strict keys are checked against an exact token bucket.
func (k keySpec) item(name, key string, cost int64) *pb.Item {
	return &pb.Item{Name: name, Key: key, Algorithm: pb.Algorithm_ALGORITHM_TOKEN_BUCKET,
		Limit: k.limit.Limit, Period: durationpb.New(k.limit.Period), Burst: k.limit.Burst,
		Cost: cost, Fail: pb.FailMode_FAIL_MODE_CLOSED}
}

// run starts the clients and returns when ctx is done and they have stopped.
// Strict clients pace themselves (about 10 checks a second each) so that
// per-key histories stay small enough for the linearizability search;
// leased clients run as fast as a pause of up to leasedPause allows.
func (w *workload) run(ctx context.Context, strictClients, leasedClients int) {
	var wg sync.WaitGroup
	for i := range strictClients {
		wg.Go(func() { w.client(ctx, i, pb.Mode_MODE_STRICT) })
	}
	for i := range leasedClients {
		wg.Go(func() { w.client(ctx, strictClients+i, pb.Mode_MODE_LEASED) })
	}
	wg.Go(func() {
		defer w.guard.catch()
		w.fill.run(ctx, w.c, &w.entries)
	})
	wg.Wait()
}

// client is one client: its own connection, to its home node id % n, to
// the next node after a call that failed or was answered "unavailable" (as
// a client with a list of nodes would do), and home again after a while.
func (w *workload) client(ctx context.Context, id int, mode pb.Mode) {
	defer w.guard.catch()
	r := rand.New(rand.NewPCG(w.seed, uint64(id)))
	home := id % len(w.c.agents)
	node, moved := home, time.Time{}
	var cl *client.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	var oks []int64
	defer func() { w.addOK(mode, oks) }()
	for ctx.Err() == nil {
		if cl == nil {
			var err error
			if cl, err = client.Dial(w.c.agents[node].rpc(), w.c.dialOpts...); err != nil {
				return // only a malformed address fails here
			}
		}
		var ok, failed bool
		if mode == pb.Mode_MODE_STRICT {
			ok, failed = w.strictOp(ctx, cl, id, w.strict[r.IntN(len(w.strict))], r)
			sleep(ctx, time.Duration(50+r.IntN(100))*time.Millisecond)
		} else {
			ok, failed = w.leasedOp(ctx, cl, w.leased[r.IntN(len(w.leased))])
			sleep(ctx, time.Duration(r.Int64N(int64(w.leasedPause))))
		}
		if ok {
			oks = append(oks, time.Now().UnixNano())
		}
		switch {
		case failed:
			cl.Close()
			cl, node, moved = nil, (node+1)%len(w.c.agents), time.Now()
		case node != home && time.Since(moved) > goHomeAfter:
			// Clients that all moved on from one failed node would
			// otherwise stay together, and one later fault would stall
			// them all: the load would no longer be spread over nodes.
			cl.Close()
			cl, node = nil, home
		}
	}
}

// goHomeAfter is how long a client that moved on from a failed node stays
// away from its own node.
const goHomeAfter = 5 * time.Second

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (w *workload) addOK(mode pb.Mode, times []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ok[mode] = append(w.ok[mode], times...)
}

// strictOp runs one strict check and records it. It reports whether the
// check was decided (ALLOW or DENY from the log) and whether it was not.
func (w *workload) strictOp(ctx context.Context, cl *client.Client, id int, k *strictKey, r *rand.Rand) (ok, failed bool) {
	cost := int64(1)
	if r.IntN(5) == 0 {
		cost = 2
	}
	op := k.rec.Invoke(id, cost, time.Now())
	// A failed call is Unknown even when it never left the client
	// (connection refused): that is always sound.
	out, at, index, sh, _ := strictCheck(ctx, cl, k, cost)
	k.rec.Complete(op, time.Now(), out, at, index, int(sh))
	if index != 0 {
		w.entries.add(sh, index, true)
	}
	return out != check.Unknown, out == check.Unknown
}

// strictCheck sends one strict check of cost. A DENY that the log did not
// decide (fail-closed while the shard had no leader) is Unknown: the check
// may have been proposed and applied after all.
func strictCheck(ctx context.Context, cl *client.Client, k *strictKey, cost int64) (out check.Outcome, at int64, index uint64, shard int64, err error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := cl.Check(cctx, &pb.CheckRequest{Mode: pb.Mode_MODE_STRICT, Items: []*pb.Item{k.item("chaos-strict", k.key, cost)}})
	if err != nil {
		return check.Unknown, 0, 0, 0, err
	}
	res := resp.GetResults()
	if len(res) != 1 {
		return check.Unknown, 0, 0, 0, fmt.Errorf("chaos: %d results for one item", len(res))
	}
	it := res[0]
	switch {
	case it.GetDecision() == pb.Decision_DECISION_ALLOW:
		// Every ALLOW counts, decided in the log or not: an ALLOW is what
		// over-admission is made of.
		return check.Allowed, it.GetDecidedAtUnixNano(), it.GetIndex(), it.GetShard(), nil
	case it.GetReason() == pb.Reason_REASON_OVER_LIMIT && it.GetIndex() != 0:
		return check.Denied, it.GetDecidedAtUnixNano(), it.GetIndex(), it.GetShard(), nil
	}
	return check.Unknown, 0, 0, 0, nil
}

// leasedOp runs one leased check of cost 1 and records it. It reports
// whether the check was decided, and whether it failed or was unavailable.
func (w *workload) leasedOp(ctx context.Context, cl *client.Client, k *leasedKey) (ok, failed bool) {
	call := time.Now()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	resp, err := cl.Check(cctx, &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: []*pb.Item{k.item("chaos-leased", k.key, 1)}})
	cancel()
	ret := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.first == 0 || call.UnixNano() < k.first {
		k.first = call.UnixNano()
	}
	if err != nil || len(resp.GetResults()) != 1 {
		k.unknown++
		return false, true
	}
	it := resp.GetResults()[0]
	switch {
	case it.GetDecision() == pb.Decision_DECISION_ALLOW:
		k.allows = append(k.allows, span{call.UnixNano(), ret.UnixNano()})
		return true, false
	case it.GetReason() == pb.Reason_REASON_UNAVAILABLE:
		k.unavailable++
		return false, true
	default:
		k.denied++
		return true, false
	}
}

// keyShard returns the shard that decided strict key i (modulo their
// number) last, if any did, and the key's hash.
func (w *workload) keyShard(i int) (shard int, hash uint64, ok bool) {
	if len(w.strict) == 0 {
		return 0, 0, false
	}
	k := w.strict[i%len(w.strict)]
	h := k.rec.History()
	for j := len(h) - 1; j >= 0; j-- {
		if h[j].Index != 0 {
			return h[j].Shard, keyhash.Sum(ring.BucketKey("chaos-strict", k.key)), true
		}
	}
	return 0, 0, false
}
