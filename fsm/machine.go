package fsm

import (
	"fmt"
	"time"

	"github.com/quorate/quorate/keyhash"
)

// OpKind says what an Op does. Values are part of the wire format: append only.
type OpKind uint8

// The operations.
const (
	opUnspecified OpKind = iota
	// OpTake consumes Cost from the bucket if the limit allows it. A Take of
	// cost 0 reports like a Peek.
	OpTake
	// OpPeek reports what a Take of Cost would decide, consuming nothing.
	OpPeek
	// OpRefund gives Cost back to the bucket, never above its capacity.
	OpRefund
	// OpReset forgets the bucket and the leases taken from it.
	OpReset
	// OpGrant deducts up to Cost from the bucket up front and records a lease
	// held by Holder for TTL. With Lease set it renews that lease of the
	// same holder: Held of it carries into the new one.
	OpGrant
	// OpReturn ends lease Lease and gives back min(Cost, granted) of it; with
	// Held set the lease lives on, trimmed to Held. With Key and Holder set
	// it finds only a lease of that bucket and holder.
	OpReturn
	// OpCredit grants Holder a credit for TTL: budget on every bucket of
	// scope Key that does not exist yet (see credit.go). Limit is not used.
	OpCredit
	numOps
)

var opNames = [numOps]string{"unspecified", "take", "peek", "refund", "reset", "grant", "return", "credit"}

func (k OpKind) String() string {
	if k < numOps {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one operation of a Command.
type Op struct {
	Kind  OpKind
	Key   string
	Limit Limit // every kind but Reset and Return
	// Cost is the units the op concerns: the cost of a Take or Peek, the
	// amount a Refund gives back, the amount a Grant asks for, and the unused
	// amount a Return hands back.
	Cost int64
	// IdempotencyKey makes a Take happen at most once within
	// Config.DedupeWindow: a repeat returns the first Result, replayed. On a
	// Refund it forgets that record, undoing the take.
	IdempotencyKey string
	Holder         string        // Grant: who holds the lease (a node ID)
	TTL            time.Duration // Grant: how long the lease may be spent
	Lease          uint64        // Return: the lease being returned; Grant: the lease being renewed
	// Held is, for a Grant that renews Lease or a Return that trims it,
	// what the holder still holds of that lease and keeps spending. The
	// rest of the lease counts as spent at this command's time.
	Held int64
	// At is, for a Refund, when the take being undone was decided (machine
	// time, Unix ns; 0 means now). Window algorithms give units back only to
	// the window that counted them, so a refund that arrives after that
	// window closed gives nothing back rather than a slot in a new window.
	At int64
	// Group makes a contiguous run of Takes with the same non-zero Group
	// all-or-nothing: if any of them is denied or invalid, the others are
	// refunded in the same command (Result.Refunded), so a denied request
	// consumes nothing from buckets that share its group.
	Group uint32
}

// Command is a batch of operations applied at one instant. Raft replicates
// commands; the leader stamps Now (Unix nanoseconds) so that every replica
// computes with the same time.
type Command struct {
	Now int64
	Ops []Op
}

// Result is the outcome of one Op.
type Result struct {
	// Allowed: the Take or Peek fits; the Grant granted something; the Return
	// found its lease. Refund and Reset always report true.
	Allowed bool
	// Replayed: this is the stored result of an earlier Take with the same
	// idempotency key.
	Replayed bool
	// Refunded: the op was allowed by its bucket but given back because
	// another op of its Group was denied.
	Refunded   bool
	Limit      int64         // the bucket's capacity
	Remaining  int64         // units left after the op
	ResetAfter time.Duration // until the bucket is back to full (or the window's count is gone)
	RetryAfter time.Duration // until an op of this cost could be allowed; 0 when allowed
	Delay      time.Duration // LeakyShaping: how long the caller must wait before acting
	Lease      uint64        // Grant: the new lease's ID
	// Granted is, for a Grant, the units the new lease holds: those
	// deducted now plus those carried over from the renewed lease (at most
	// its Held); for a Return, the units credited back.
	Granted int64
	Expires int64 // Grant, Credit: when it expires (Unix nanoseconds, state machine time)
	// Filter is, for a Credit, the buckets that existed at the grant: the
	// credit must not be spent on a key it may contain.
	Filter Filter
	// Range is, for a Credit, the hash range the group owned at the grant
	// (zero: every hash): the credit must not be spent on a key whose hash
	// it does not contain, since another group decides those (split.go).
	Range Range
	Err   error // the op was invalid and changed nothing
}

// Config tunes a Machine. The zero value takes the defaults. All replicas of
// a group must use the same Config.
type Config struct {
	// MaxClockJump bounds how far one command can move the machine's time
	// forward (default 1m). See the package doc.
	MaxClockJump time.Duration
	// DedupeWindow is how long an idempotency key is remembered (default 2m).
	DedupeWindow time.Duration
	// MaxLeaseTTL caps Grant's TTL (default 1m).
	MaxLeaseTTL time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxClockJump <= 0 {
		c.MaxClockJump = time.Minute
	}
	if c.DedupeWindow <= 0 {
		c.DedupeWindow = 2 * time.Minute
	}
	if c.MaxLeaseTTL <= 0 {
		c.MaxLeaseTTL = time.Minute
	}
	return c
}

// Machine is the replicated state of one group: every bucket, lease and
// idempotency record, and the group's clock. It is not safe for concurrent
// use; the Raft layer applies commands from one goroutine.
type Machine struct {
	cfg Config

	now       int64  // machine time: max of all command times, clamped
	nextLease uint64 // ID of the next lease granted

	// One table per state shape, keyed by xxhash64 of the key. Entries whose
	// expiry has passed are equivalent to absent ones; see sweep.
	tokens  map[uint64]tbState // TokenBucket and LeakyPolicing
	leaky   map[uint64]tbState
	tats    map[uint64]int64 // GCRA: theoretical arrival time
	queues  map[uint64]int64 // LeakyShaping: when the queue drains
	fixed   map[uint64]fwState
	sliding map[uint64]swState
	logs    map[uint64]*logState
	leases  map[uint64]*lease
	idem    map[uint64]idemEntry
	// byKey indexes lease IDs by bucket, ascending, for counting holders.
	// It may name dead leases (lookups skip them); it is rebuilt on Restore
	// rather than snapshotted.
	byKey map[uint64][]uint64
	// credits holds, per scope, the expiry of every credit live or expired
	// less than creditMemory ago, ascending.
	credits map[string][]int64
	// index holds every key of tokens, leaky, tats and byKey, for credit
	// filters (see bucketIndex); not snapshotted.
	index bucketIndex
	// scope is the credit scope of the bucket the op being applied works
	// on (see CreditScope), set before each op so that the bucket algorithms
	// can charge credits without a key parameter.
	scope string

	sweepNext int // which table the next sweep visits
	sweepDebt int // entries owed to the sweeper by the commands so far

	// Split state (split.go). owned is the hash range the machine serves
	// (zero: every hash); while loading, it serves nothing until the last
	// chunk of an adoption, nextSeq being the chunk it expects. frozen is
	// the state a fence took out of the live tables, kept until Release.
	owned   Range
	loading bool
	nextSeq uint64
	frozen  *Frozen
}

// New returns an empty Machine.
func New(cfg Config) *Machine {
	m := &Machine{cfg: cfg.withDefaults()}
	m.reset()
	return m
}

func (m *Machine) reset() {
	m.now, m.nextLease = 0, 1
	m.tokens = make(map[uint64]tbState)
	m.leaky = make(map[uint64]tbState)
	m.tats = make(map[uint64]int64)
	m.queues = make(map[uint64]int64)
	m.fixed = make(map[uint64]fwState)
	m.sliding = make(map[uint64]swState)
	m.logs = make(map[uint64]*logState)
	m.leases = make(map[uint64]*lease)
	m.idem = make(map[uint64]idemEntry)
	m.byKey = make(map[uint64][]uint64)
	m.credits = make(map[string][]int64)
	m.index = bucketIndex{}
}

// Now returns the machine's time in Unix nanoseconds.
func (m *Machine) Now() int64 { return m.now }

// Apply applies cmd's operations in order at one instant, appending one
// Result per Op to results. Operations on the same key see each other's
// effects. An invalid op gets a Result with Err set and changes nothing;
// the others still apply.
func (m *Machine) Apply(cmd *Command, results []Result) []Result {
	m.advance(cmd.Now)
	first := len(results)
	for i := range cmd.Ops {
		results = append(results, m.apply(&cmd.Ops[i]))
	}
	m.settleGroups(cmd.Ops, results[first:])
	m.sweepDebt += sweepBudget(len(cmd.Ops))
	if m.sweepDebt >= sweepBatch {
		m.sweep(m.sweepDebt)
		m.sweepDebt = 0
	}
	return results
}

// settleGroups refunds the allowed Takes of every group that had a denial.
func (m *Machine) settleGroups(ops []Op, rs []Result) {
	for i := 0; i < len(ops); {
		j, denied := i, false
		for ; j < len(ops) && ops[j].Group == ops[i].Group; j++ {
			denied = denied || !rs[j].Allowed || rs[j].Err != nil
		}
		if ops[i].Group != 0 && denied {
			for k := i; k < j; k++ {
				op := &ops[k]
				if op.Kind == OpTake && rs[k].Allowed && !rs[k].Replayed && rs[k].Err == nil && op.Cost > 0 {
					h := keyhash.Sum(op.Key)
					m.scope = CreditScope(op.Key)
					m.credit(h, op.Limit, op.Cost, 0)
					rs[k].Refunded = true
					p := m.take(h, op.Limit, 0, false)
					rs[k].Remaining, rs[k].ResetAfter = p.Remaining, p.ResetAfter
					if op.IdempotencyKey != "" {
						// The take did not happen: a retry is decided afresh.
						delete(m.idem, idemHash(h, op.IdempotencyKey))
					}
				}
			}
		}
		i = j
	}
}

// Take is a shorthand for applying one OpTake at now.
func (m *Machine) Take(now time.Time, key string, l Limit, cost int64) Result {
	cmd := Command{Now: now.UnixNano(), Ops: []Op{{Kind: OpTake, Key: key, Limit: l, Cost: cost}}}
	var r [1]Result
	return m.Apply(&cmd, r[:0])[0]
}

// maxTime caps command times (2116-02-20) so that every deadline the
// machine computes, at most MaxRefill ahead, fits in int64 nanoseconds.
const maxTime = 1 << 62

// advance moves machine time to the command's time: never backwards (a new
// leader's clock may be behind the old one's), and never forward by more
// than MaxClockJump in one step.
func (m *Machine) advance(t int64) {
	t = min(t, maxTime)
	switch {
	case m.now == 0:
		if t > 0 {
			m.now = t
		}
	case t > m.now:
		m.now = min(t, m.now+int64(m.cfg.MaxClockJump))
	}
}

func (m *Machine) apply(op *Op) Result {
	if err := op.validate(m.cfg); err != nil {
		return Result{Err: err}
	}
	h := keyhash.Sum(op.Key)
	if !m.serves(op.Kind, h) {
		return Result{Err: ErrMoved}
	}
	m.scope = CreditScope(op.Key)
	switch op.Kind {
	case OpTake:
		if op.IdempotencyKey != "" && op.Cost > 0 {
			return m.takeOnce(h, op)
		}
		return m.take(h, op.Limit, op.Cost, op.Cost > 0)
	case OpPeek:
		return m.take(h, op.Limit, op.Cost, false)
	case OpRefund:
		if op.IdempotencyKey != "" {
			// Refunding an idempotent take undoes it: a retry is decided
			// afresh rather than replaying an allow that no longer counts.
			delete(m.idem, idemHash(h, op.IdempotencyKey))
		}
		return m.refund(h, op.Limit, op.Cost, op.At)
	case OpReset:
		m.forget(h)
		return Result{Allowed: true}
	case OpGrant:
		return m.grant(h, op)
	case OpReturn:
		return m.giveBack(op)
	case OpCredit:
		r := m.grantCredit(op)
		r.Range = m.owned
		return r
	}
	return Result{Err: ErrUnknownOp}
}

func (op *Op) validate(cfg Config) error {
	if op.Kind == opUnspecified || op.Kind >= numOps {
		return fmt.Errorf("%w: %d", ErrUnknownOp, op.Kind)
	}
	switch op.Kind {
	case OpReturn:
		if op.Cost < 0 || op.Held < 0 {
			return fmt.Errorf("%w: cost %d, held %d", ErrCost, op.Cost, op.Held)
		}
		return nil
	case OpCredit:
		if len(op.Key) > MaxKeyLen {
			return fmt.Errorf("%w: %d bytes > %d", ErrKeyTooLong, len(op.Key), MaxKeyLen)
		}
		return validateHolder(op, cfg)
	}
	if op.Key == "" {
		return ErrEmptyKey
	}
	if len(op.Key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes > %d", ErrKeyTooLong, len(op.Key), MaxKeyLen)
	}
	if len(op.IdempotencyKey) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes > %d", ErrIdempotencyKey, len(op.IdempotencyKey), MaxKeyLen)
	}
	if op.Kind == OpReset {
		return nil
	}
	if err := op.Limit.Validate(); err != nil {
		return err
	}
	if op.Cost < 0 || op.Cost > op.Limit.Capacity() {
		return fmt.Errorf("%w: %d not in [0, %d]", ErrCost, op.Cost, op.Limit.Capacity())
	}
	if op.Kind == OpGrant {
		if op.Held < 0 {
			return fmt.Errorf("%w: held %d", ErrCost, op.Held)
		}
		if !op.Limit.Algorithm.Leasable() {
			return fmt.Errorf("%w: %s", ErrNotLeasable, op.Limit.Algorithm)
		}
		return validateHolder(op, cfg)
	}
	return nil
}

// validateHolder checks the holder and TTL of a Grant or Credit.
func validateHolder(op *Op, cfg Config) error {
	if op.TTL <= 0 || op.TTL > cfg.MaxLeaseTTL {
		return fmt.Errorf("%w: %s not in (0, %s]", ErrLeaseTTL, op.TTL, cfg.MaxLeaseTTL)
	}
	if op.Holder == "" || len(op.Holder) > MaxHolderLen {
		return fmt.Errorf("%w: %q", ErrHolder, op.Holder)
	}
	return nil
}
