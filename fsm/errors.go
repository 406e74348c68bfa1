package fsm

import "errors"

// Errors returned by validation, by Apply (inside a Result) and by the
// decoders. Validation errors wrap these with the offending value, so callers
// should test them with errors.Is.
var (
	// ErrEmptyKey: every bucket needs a key.
	ErrEmptyKey = errors.New("fsm: empty key")
	// ErrKeyTooLong: keys are capped at MaxKeyLen bytes.
	ErrKeyTooLong = errors.New("fsm: key too long")
	// ErrUnknownAlgorithm: the algorithm is not one of the Algorithm constants.
	ErrUnknownAlgorithm = errors.New("fsm: unknown algorithm")
	// ErrLimit: the limit must be in [1, MaxLimit].
	ErrLimit = errors.New("fsm: limit out of range")
	// ErrBurst: the burst (capacity) must be in [0, MaxLimit]; 0 means the limit.
	ErrBurst = errors.New("fsm: burst out of range")
	// ErrPeriod: the period must be in [MinPeriod, MaxPeriod] (MaxLogPeriod
	// for a sliding log) and long enough that one token takes at least a
	// nanosecond.
	ErrPeriod = errors.New("fsm: period out of range")
	// ErrCost: the cost must be in [0, capacity]; a cost above capacity could
	// never be allowed, so it is refused instead of denied forever.
	ErrCost = errors.New("fsm: cost out of range")
	// ErrLogTooLarge: a sliding log keeps up to one entry per admitted unit,
	// so its limit is capped at MaxLogLimit to bound memory per key.
	ErrLogTooLarge = errors.New("fsm: sliding log limit too large")
	// ErrNotLeasable: the algorithm cannot hand out budget in advance safely.
	ErrNotLeasable = errors.New("fsm: algorithm cannot be leased")
	// ErrLeaseTTL: a lease TTL must be in (0, Config.MaxLeaseTTL].
	ErrLeaseTTL = errors.New("fsm: lease ttl out of range")
	// ErrHolder: a lease holder must be named, in at most MaxHolderLen bytes.
	ErrHolder = errors.New("fsm: bad lease holder")
	// ErrIdempotencyKey: idempotency keys are capped at MaxKeyLen bytes.
	ErrIdempotencyKey = errors.New("fsm: idempotency key too long")
	// ErrUnknownOp: the operation kind is not one of the Op constants.
	ErrUnknownOp = errors.New("fsm: unknown operation")
	// ErrCorrupt: encoded bytes (a command, results or a snapshot) are
	// truncated, malformed or fail their checksum.
	ErrCorrupt = errors.New("fsm: corrupt encoding")
	// ErrVersion: encoded bytes come from a format version this build does
	// not understand.
	ErrVersion = errors.New("fsm: unsupported encoding version")
	// ErrMoved: the op's key hashes outside the range this group owns, or
	// the group is still loading the range it adopts (see split.go). The
	// op changed nothing; it belongs to another group.
	ErrMoved = errors.New("fsm: the key's hash range is not served by this group")
	// ErrSplit: a control entry (fence, adopt, release) does not fit the
	// machine's split state; it changed nothing.
	ErrSplit = errors.New("fsm: split control refused")
)

// errorCodes gives each error a stable number for the wire. Append only.
var errorCodes = []error{
	nil,
	ErrEmptyKey,
	ErrKeyTooLong,
	ErrUnknownAlgorithm,
	ErrLimit,
	ErrBurst,
	ErrPeriod,
	ErrCost,
	ErrLogTooLarge,
	ErrNotLeasable,
	ErrLeaseTTL,
	ErrHolder,
	ErrIdempotencyKey,
	ErrUnknownOp,
	ErrMoved,
}

func errorCode(err error) uint64 {
	for i, e := range errorCodes[1:] {
		if errors.Is(err, e) {
			return uint64(i + 1)
		}
	}
	if err != nil {
		return uint64(len(errorCodes)) // unknown: decodes as ErrCorrupt
	}
	return 0
}

func codeError(c uint64) error {
	if c < uint64(len(errorCodes)) {
		return errorCodes[c]
	}
	return ErrCorrupt
}
