package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// The decision log's cost to checks: descriptor checks of a node's engine
// (strict, against in-memory state machines: the node's own work without
// Raft's), with the recorder off, with the log writing 10% of allows to a
// file, and with a sink that never returns, in one run:
//
//	go test -run '^$' -bench DecisionLog -benchmem ./cluster/

// memShards applies each batch to one state machine per shard at once,
// with a lock per shard as a node has a Raft group per shard.
type memShards struct {
	mu []sync.Mutex
	r  *ring.Ring
	m  []*fsm.Machine
}

func newMemShards(n int) *memShards {
	r, _ := ring.New(n)
	s := &memShards{r: r, mu: make([]sync.Mutex, n)}
	for range n {
		s.m = append(s.m, fsm.New(fsm.Config{}))
	}
	return s
}

func (s *memShards) Routes() (*ring.Ring, <-chan struct{}) { return s.r, nil }

func (s *memShards) Submit(_ context.Context, sh int, ops []fsm.Op, atomic bool) (decide.Applied, error) {
	s.mu[sh].Lock()
	defer s.mu[sh].Unlock()
	cmd := &fsm.Command{Now: time.Now().UnixNano(), Ops: slices.Clone(ops)}
	if atomic {
		for j := range cmd.Ops {
			cmd.Ops[j].Group = 1
		}
	}
	return decide.Applied{Results: s.m[sh].Apply(cmd, nil), Now: s.m[sh].Now()}, nil
}

type benchPolicies struct{ snap *policy.Snapshot }

func (p benchPolicies) Policies() (*policy.Snapshot, bool) { return p.snap, true }

// blockingSink takes no line until the benchmark ends.
type blockingSink struct{ release chan struct{} }

func (s blockingSink) Name() string                        { return "blocking" }
func (s blockingSink) Batching() decisionlog.Batching      { return decisionlog.Batching{} }
func (s blockingSink) Write(context.Context, []byte) error { <-s.release; return nil }
func (s blockingSink) Close() error                        { return nil }

// benchPolicySet is one per-tenant bucket too large to deny.
const benchPolicySet = `
policies:
  - policy_id: plan
    scope: { tenant_id: "*" }
    key: [tenant_id]
    algorithm: TOKEN_BUCKET
    config: { rate: 1000000000/s }
`

// checkInParallel runs b.N descriptor checks of 1000 tenants through an
// engine with rec.
func checkInParallel(b *testing.B, rec decide.Recorder) {
	ps, err := policy.Parse("bench.yaml", []byte(benchPolicySet))
	if err != nil {
		b.Fatal(err)
	}
	snap, err := policy.Compile(ps, nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	e := decide.New(decide.Config{Shards: newMemShards(4), Policies: benchPolicies{snap}, Recorder: rec, CheckTimeout: time.Minute})
	defer e.Close()
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	// A node's checks come from many gRPC handlers at once. With only one
	// goroutine per core, any other goroutine that wakes (the log's
	// writer) parks a checker holding a shard's lock and stalls the other.
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		req := &decide.Request{ID: "bench", Descriptors: &decide.Descriptors{}}
		for pb.Next() {
			req.Descriptors.TenantID = fmt.Sprint("t", next.Add(1)%1000)
			if _, err := e.Check(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkDecisionLog(b *testing.B) {
	// recorder reports, after its run, the records the log dropped per
	// check.
	recorder := func(b *testing.B, sinks ...decisionlog.Sink) *decisions {
		reg := prometheus.NewRegistry()
		d, err := newDecisions("n1", reg, decisionlog.Config{Sinks: sinks, AllowFraction: 0.1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			b.ReportMetric(gathered(b, reg, "quorate_decision_log_dropped_total")/float64(b.N), "dropped/op")
			b.ReportMetric(gathered(b, reg, "quorate_decision_log_records_total")/float64(b.N), "logged/op")
			d.close()
		})
		return d
	}
	b.Run("recorder=none", func(b *testing.B) { checkInParallel(b, nil) })
	b.Run("log=off", func(b *testing.B) { checkInParallel(b, recorder(b)) })
	b.Run("log=file", func(b *testing.B) {
		s, err := decisionlog.ParseSink("file:" + filepath.Join(b.TempDir(), "decisions.jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		checkInParallel(b, recorder(b, s))
	})
	b.Run("log=blocked", func(b *testing.B) {
		release := make(chan struct{})
		d := recorder(b, blockingSink{release})
		b.Cleanup(func() { close(release) })
		checkInParallel(b, d)
	})
}

// gathered sums a counter's series in reg.
func gathered(b *testing.B, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
