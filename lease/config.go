package lease

import (
	"context"
	"time"

	"github.com/quorate/quorate/fsm"
)

// Submitter is the table's way to its shards: apply ops on a shard's
// leader, as one Raft entry, and report what the state machine answered.
// The table submits Grant, Return and Credit ops only, never as an atomic
// group. An error means the outcome is unknown: the ops may have been
// applied.
type Submitter interface {
	Submit(ctx context.Context, shard int, ops []fsm.Op) (Applied, error)
}

// Applied is what a shard answered for a batch of ops.
type Applied struct {
	Results []fsm.Result // one per op, in order
	Index   uint64       // the log entry that carried the ops
	Now     int64        // the state machine's time when it applied them (Unix ns)
}

// Metrics receives what the table counts. The result strings are metric
// label values and stay stable.
type Metrics interface {
	// GrantWait observes one grant request's round trip (one per Submit of
	// grants, however many buckets it carries).
	GrantWait(time.Duration)
	// Grant counts one bucket's grant by result: "acquired" (the node held
	// no lease), "renewed", "empty" (the bucket had nothing to give) or
	// "error".
	Grant(result string)
	// Returned counts n returns of unused budget by result: "ok" or "error".
	Returned(result string, n int)
	// Credit counts one credit request by result: "granted", "refused"
	// (the shard holds its quota of credits) or "error".
	Credit(result string)
	// CreditDecision counts one check allowed from a credit.
	CreditDecision()
	// Shed counts work dropped because a bounded queue or table was full:
	// "grant" (a renewal signal; the next renewal round picks the entry
	// up) or "credit_slot" (a credit not asked for: the check goes to a
	// grant or the strict path).
	Shed(queue string)
}

// Config tunes a Table. Zero values take the defaults.
type Config struct {
	// Holder names this node to the state machine (its node ID): the shard
	// shares a bucket among distinct holders.
	Holder string
	// TTL is the lease lifetime asked for (default 5s).
	TTL time.Duration
	// CreditTTL is the credit lifetime asked for; 0 disables credits.
	CreditTTL time.Duration
	// RenewInterval is the demand a grant covers and the period of the
	// renewal rounds (default 500ms).
	RenewInterval time.Duration
	// AcquireWait is how long a check that found no budget waits for the
	// grant that carries it before the caller decides it strictly (default
	// 250ms).
	AcquireWait time.Duration
	// SubmitTimeout bounds each grant, return and credit request (default 1s).
	SubmitTimeout time.Duration
	// Workers is the number of goroutines sending grants (default 8).
	Workers int
	// QueueLen bounds the entries waiting for a grant worker (default
	// 4096); past it, signals are shed and counted (Metrics.Shed).
	QueueLen int
	// MaxCreditSlots bounds the (shard, limit name) credit slots this node
	// keeps (default 4096); idle ones are reclaimed after a credit
	// lifetime. Past it, no new credit is asked for.
	MaxCreditSlots int
	// Clock is the local clock that lease and credit deadlines are read on
	// (default time.Now).
	Clock func() time.Time
	// Metrics receives the table's counts (default: none kept).
	Metrics Metrics
}

func (c *Config) setDefaults() {
	if c.TTL <= 0 {
		c.TTL = 5 * time.Second
	}
	if c.RenewInterval <= 0 {
		c.RenewInterval = 500 * time.Millisecond
	}
	if c.AcquireWait <= 0 {
		c.AcquireWait = 250 * time.Millisecond
	}
	if c.SubmitTimeout <= 0 {
		c.SubmitTimeout = time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 4096
	}
	if c.MaxCreditSlots <= 0 {
		c.MaxCreditSlots = 4096
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
}

type noMetrics struct{}

func (noMetrics) GrantWait(time.Duration) {}
func (noMetrics) Grant(string)            {}
func (noMetrics) Returned(string, int)    {}
func (noMetrics) Credit(string)           {}
func (noMetrics) CreditDecision()         {}
func (noMetrics) Shed(string)             {}
