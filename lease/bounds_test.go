package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/keyhash"
)

// TestGrantQueueSheds: the queue of entries waiting for a grant worker is
// bounded; a signal that finds it full is dropped, counted, and leaves the
// entry free to be signalled again (the renewal round picks it up).
func TestGrantQueueSheds(t *testing.T) {
	m := &counts{}
	lt := newTable(nil, Config{QueueLen: 2, Metrics: m})
	var es []*entry
	for i := range 3 {
		es = append(es, lt.entryFor(fmt.Sprint("api\x00k", i), keyhash.Sum(fmt.Sprint("api\x00k", i)), fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Second}, 0))
		lt.signal(es[i])
	}
	if len(lt.wake) != 2 || m.get("shed:grant") != 1 {
		t.Fatalf("queue holds %d, shed %d; want 2 and 1", len(lt.wake), m.get("shed:grant"))
	}
	if es[2].renewing.Load() {
		t.Fatal("a shed entry still reads as queued: it would never be signalled again")
	}
}

// TestCreditSlotsBounded: a node keeps at most MaxCreditSlots credit slots
// (one per shard and limit name), sheds the rest with a count, and
// reclaims slots unused for a credit lifetime, so slots follow the names in
// use rather than every name ever checked.
func TestCreditSlotsBounded(t *testing.T) {
	clk := newClock()
	f := newMachines(clk)
	n := newNode(t, f, Config{Holder: "n1", TTL: time.Second, CreditTTL: 2 * time.Second, MaxCreditSlots: 2, Workers: 1})
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1000, Period: time.Second}
	for i := range 3 {
		n.spend(fmt.Sprintf("name%d\x00k", i), l, 1, 0)
	}
	if got := n.credits.slotCount(); got != 2 {
		t.Fatalf("%d credit slots, want the bound 2", got)
	}
	if n.metrics.get("shed:credit_slot") != 1 {
		t.Fatalf("shed %d credit slots, want 1", n.metrics.get("shed:credit_slot"))
	}
	await.True(t, 10*time.Second, "credit requests to end", func() bool {
		n.credits.mu.RLock()
		defer n.credits.mu.RUnlock()
		for _, sl := range n.credits.slots {
			if sl.asking.Load() {
				return false
			}
		}
		return true
	})
	clk.Advance(3 * time.Second) // past the credits' lives, unused
	n.round(clk.Now())
	if got := n.credits.slotCount(); got != 0 {
		t.Fatalf("%d idle credit slots kept, want 0", got)
	}
	// A reclaimed slot is made again on use.
	n.spend("name0\x00k2", l, 1, 0)
	if got := n.credits.slotCount(); got != 1 {
		t.Fatalf("%d slots after a new use, want 1", got)
	}
}
