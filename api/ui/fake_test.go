package ui

import (
	"context"
	"sync"
	"time"
)

// t0 is where every test's clock starts.
var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

const (
	readToken  = "read-3f9c2a"
	checkToken = "check-77aa01"
)

// authorize accepts only readToken, as a node's read scope would.
func authorize(tok string) bool { return tok == readToken }

// fakeSource is a cluster whose state a test changes between polls. Each
// call moves its clock on by step, so the page sees evenly spaced
// overviews, and adds perCall to each policy's totals, a steady load.
type fakeSource struct {
	mu      sync.Mutex
	ov      Overview          // guarded by mu
	step    time.Duration     // guarded by mu
	perCall map[string]Policy // by policy id; guarded by mu
	calls   int               // guarded by mu
	err     error             // returned instead of the overview; guarded by mu
	block   chan struct{}     // if set, each call waits for it; guarded by mu
}

func newFakeSource() *fakeSource {
	return &fakeSource{step: time.Second, perCall: map[string]Policy{}, ov: Overview{
		Node: "n1",
		Time: t0,
		Nodes: []Node{
			{ID: "n1", RPCAddr: "127.0.0.1:7401", HTTPAddr: "127.0.0.1:7501", State: "alive", Membership: "member", Reachable: true, Ready: true, PolicyVersion: 7,
				Leases: Leases{Buckets: 12, Held: 340, Hits: 9800, Misses: 200}},
			{ID: "n2", RPCAddr: "127.0.0.1:7402", HTTPAddr: "127.0.0.1:7502", State: "alive", Membership: "member", Reachable: true, Ready: true, PolicyVersion: 7,
				Leases: Leases{Buckets: 10, Held: 300, Hits: 5000, Misses: 50}},
			{ID: "n3", RPCAddr: "127.0.0.1:7403", HTTPAddr: "127.0.0.1:7503", State: "alive", Membership: "member", Reachable: true, Ready: true, PolicyVersion: 6,
				Leases: Leases{Buckets: 4, Held: 80, Hits: 700, Misses: 90}},
		},
		Shards: []Shard{
			{ID: 1, Leader: "n1", Replicas: []string{"n1", "n2", "n3"}, Term: 3, AppliedIndex: 18234},
			{ID: 2, Leader: "n2", Replicas: []string{"n1", "n2", "n3"}, Term: 2, AppliedIndex: 9921},
			{ID: 3, Leader: "n3", Replicas: []string{"n2", "n3", "n1"}, Term: 5, AppliedIndex: 30112},
		},
		Moves:             []Move{{Shard: 3, Add: "n1", Remove: "n4"}},
		Splits:            []Split{{Parent: 2, Child: 4, At: 0x8000000000000000}},
		UnderReplicated:   []uint32{3},
		PolicyVersionSkew: 1,
		Policies: []Policy{
			{ID: "api", Mode: "HARD", Allowed: 4000, Denied: 12, ShadowWouldDeny: 0, FailOpen: 2},
			{ID: "plan_free", Mode: "HARD", Allowed: 900, Denied: 310},
			{ID: "free_30_trial", Mode: "SHADOW", Allowed: 1200, ShadowWouldDeny: 44},
		},
		TopDenied: []TopKey{
			{Policy: "plan_free", Key: "tenant_id=t_1", Count: 250, Err: 3},
			{Policy: "api", Key: `<img src=x onerror="alert(1)">`, Count: 12},
		},
		FailOpen: []Event{
			{Time: t0.Add(-4 * time.Second), Node: "n2", Policy: "api", RequestID: "r-91", Reason: "STORE_UNAVAILABLE", Key: "api_key_id=k_9"},
		},
	}}
}

func (f *fakeSource) Overview(ctx context.Context) (*Overview, error) {
	f.mu.Lock()
	f.calls++
	block := f.block
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.ov.Time = f.ov.Time.Add(f.step)
	for i, p := range f.ov.Policies {
		d := f.perCall[p.ID]
		p.Allowed += d.Allowed
		p.Denied += d.Denied
		p.ShadowWouldDeny += d.ShadowWouldDeny
		f.ov.Policies[i] = p
	}
	return clone(&f.ov), nil
}

// update changes the cluster under the lock.
func (f *fakeSource) update(change func(ov *Overview)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.ov)
}

func (f *fakeSource) load(policy string, perCall Policy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.perCall[policy] = perCall
}

func (f *fakeSource) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// clone copies the slices a test may change later, so an answer already
// handed out stays as it was.
func clone(ov *Overview) *Overview {
	c := *ov
	c.Nodes = append([]Node(nil), ov.Nodes...)
	c.Shards = append([]Shard(nil), ov.Shards...)
	c.Policies = append([]Policy(nil), ov.Policies...)
	c.Moves = append([]Move(nil), ov.Moves...)
	c.Splits = append([]Split(nil), ov.Splits...)
	c.UnderReplicated = append([]uint32(nil), ov.UnderReplicated...)
	c.TopDenied = append([]TopKey(nil), ov.TopDenied...)
	c.FailOpen = append([]Event(nil), ov.FailOpen...)
	return &c
}
