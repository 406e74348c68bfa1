// Package fsm is quorate's deterministic heart: the bucket algorithms, leases
// and idempotency records that every replica of a Raft group applies
// identically. Everything here is a pure function of (state, command, now):
// no goroutines, no clocks, no I/O, and integer arithmetic only (float
// rounding and fused multiply-add differ across architectures).
//
// # Model
//
// A Machine holds the state of one group. Raft replicates Commands: a batch of
// Ops stamped with one time by the leader. Apply runs the ops in order and
// returns one Result each; ops on the same key see each other's effects.
//
//	m := fsm.New(fsm.Config{})
//	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 100, Period: time.Minute}
//	r := m.Apply(&fsm.Command{Now: now, Ops: []fsm.Op{
//		{Kind: fsm.OpTake, Key: "tenant:42", Limit: l, Cost: 1},
//	}}, nil)
//
// The Limit travels with every op instead of living in the state, so a limit
// changed at run time applies from the next op on. Algorithms, with the
// parameters their literature uses, are documented on the Algorithm constants.
//
// # Time
//
// The machine's time is max(previous time, command time): a new leader whose
// clock is behind cannot move time backwards and refill buckets twice. A
// command whose time is more than Config.MaxClockJump ahead is clamped to
// that bound, because a leader with a clock far in the future would
// otherwise drag the group's time with it for good: every bucket would
// refill at once, and since time never goes back, buckets would stop
// refilling until real clocks caught up. The Raft layer commits an empty
// command (a tick) regularly, so legitimate jumps are small; after a long
// outage the machine's time catches up one bound per command.
//
// # Keys, memory and collisions
//
// Buckets are stored under keyhash.Sum of their key (xxhash64), not the key
// itself: a token bucket costs one map slot of 8+24 bytes, and GCRA one of
// 8+8 (see BenchmarkMemoryPerBucket). Two keys with the same hash would share
// one bucket and so one budget: both would be limited together, which can
// only under-admit. With a million active keys per group the chance that any
// two collide is about 3·10⁻⁸.
//
// State equivalent to no state (a bucket full again, a window that has slid
// out, an expired lease or idempotency record) records when it expires;
// lookups treat it as absent from then on and a sweeper deletes it a few
// entries per command, so memory follows active keys, not all keys ever seen.
//
// # Leases
//
// Grant deducts budget from a bucket up front, exactly like a Take of the
// amount granted, and records a lease: holder, amount, expiry. The holder may
// spend the amount until the lease expires, without asking the group. Return
// credits back min(unused, granted), only while the lease is live and never
// above the bucket's capacity; an expired lease is forgotten and never
// credited, because its holder may have spent all of it up to the last
// moment. Window leases expire at the end of their window at the latest.
//
// The invariant that makes leased checks unable to over-admit, over any
// interval of decision times and not just over a run: a bucket's tokens
// plus the budget its holders may still spend never exceed its capacity.
// Granting moves units from the tokens to a holder; but the bucket refills
// while the holder still holds them, so every read caps the bucket's refill
// below the budget outstanding in leases (and credits): the units of a live
// lease hold their place until the lease ends, and then, counted as spent
// at its last instant, refill at the bucket's rate (clearAt in credit.go).
// A renewal (Grant naming the lease, with Held) carries what the holder
// still holds into the new lease; a Return with Held trims it. Windows
// need no cap: their leases end with the window that counted them.
//
// One grant is at most a fair share of the capacity, capacity divided by
// the distinct holders with live leases on the bucket (the asker included),
// so a newcomer is never starved by one holder's single large grant; a
// holder with more demand simply asks again sooner.
//
// # Credits
//
// A Credit is a lease on every bucket of one scope (a limit's name, see
// CreditScope) that does not exist yet: it lets a node admit up to
// CreditAllowance(limit) units (a few) on a key it has never leased, so the
// first leased check of a key needs no commit.
// The charge is virtual: every bucket of the scope is capped below capacity
// by the allowance of every live credit, and of expired ones until they have
// refilled; the grant's Filter names the buckets that existed,
// which the holder must not spend on. At most CreditsPerWindow credits live
// or expired less than CreditWindow ago keep the total charge within
// min(capacity, CreditWindow × rate). See credit.go.
//
// # Groups
//
// Takes that share a non-zero Op.Group in one contiguous run are
// all-or-nothing: when any is denied, the allowed ones are credited back in
// the same command and marked Refunded. A request whose limits all live in
// one group's shard therefore never consumes anything when it is denied.
//
// # Idempotency
//
// A Take with an IdempotencyKey happens at most once within
// Config.DedupeWindow: a repeat returns the first Result (allow or deny)
// marked Replayed and consumes nothing.
//
// # Splits
//
// A group's keys can be split off to a new group online (split.go). The
// cluster applies three control entries (ApplyControl), each through a
// Raft log: a Fence on the parent, from which on it serves only the hashes
// it keeps and holds the moved range's state frozen; one Adopt per chunk
// of that frozen state (ExportChunk) on the child, which serves nothing
// until the last chunk; and a Release on the parent, which drops the
// frozen copy. An op on a hash a group does not serve gets ErrMoved and
// changes nothing.
//
// The split is exact because the fence cuts the moved range's history in
// one place: every op on its keys is decided by the parent before the
// fence or by the child after loading, and the child starts from exactly
// the state the parent froze, taken at one instant of the parent's log
// (buckets, leases with their IDs, and the group's time). Idempotency
// records are keyed by a hash of bucket and idempotency key, so all of
// them go to the child, as do all credits: the child charges its fresh
// buckets for the credits the parent granted before the fence, like the
// unsplit group would. A credit granted after the fence carries the
// granting group's Range in its Result, and its holder spends it only on
// keys that range contains. The frozen copy never changes, so chunks are
// the same on every replica, and every control entry repeated is a
// no-op: the cluster can retry each step.
//
// # Encodings
//
// Commands, results and snapshots have versioned binary encodings. Snapshots
// end in a CRC-32C and leave out expired state in key order, so two machines
// fed the same commands write byte-identical snapshots. Decoding garbage
// returns ErrCorrupt or ErrVersion, never panics, and Restore never leaves a
// half-restored machine.
package fsm
