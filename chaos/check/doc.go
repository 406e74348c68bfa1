// Package check holds the checkers that judge histories recorded by the
// chaos harness: every strict check's invocation and completion on one key,
// under injected faults.
//
// # History
//
// An Operation is one client's check: when it was called and returned (wall
// clock, Unix ns), its cost and outcome. Allowed and Denied outcomes carry the
// state machine's time of the decision (DecidedAt) and, when known, the Raft
// log index. An Unknown outcome (timeout, transport error, crashed client)
// may or may not have happened. A Recorder builds a history from concurrent
// clients.
//
// # Linearizability
//
// CheckLinearizable runs porcupine with a token bucket model that computes
// exactly like fsm: capacity Burst (default Limit), refill
// base + floor((t-anchor)·Limit/Period), a bucket observed full re-anchored at
// the observing op. The model's clock is the op's DecidedAt (the Return time
// when it is missing), which must not go backwards along a linearization, nor
// may the Raft index.
//
// Unknown ops are modelled as follows. Their Return is treated as +∞,
// because a command that timed out at the client may still sit in the Raft
// log and be applied later. An Unknown op has no decision time, so where
// porcupine linearizes it, between a known op at time a and the next known
// op at time b, the model allows each thing the real bucket could have done
// at some time τ in [a, b]:
//
//   - nothing: the op never applied, or was denied;
//   - it took its cost before the bucket was full again: the refill anchor is
//     unchanged, so the take can be booked at a, possibly leaving a debt
//     (negative tokens); the op at b must find the debt repaid (tokens >= 0),
//     a necessary condition for some τ <= b to have had the tokens;
//   - it took its cost from a full bucket, which fsm re-anchors at τ: the
//     model then knows the anchor only as an interval, from when the bucket
//     could first be full to b, and later outcomes narrow it (a DENY needs
//     few enough tokens, an ALLOW enough), splitting it when the bucket may
//     or may not be full again.
//
// So every real execution has a matching path through the model, and the
// checker reports no false violations; the laxity (several debts checked
// together, intervals that over-approximate) can only hide a violation.
// Choosing one instant for τ instead (the op's call or return, or the
// earliest instant with enough tokens) is not sound: it fixes the phase of
// the refill, and a later DENY may need the phase to be different.
//
// # Admission
//
// CheckAdmission needs no search. Over any interval [s, t] of decision times a
// token bucket admits at most capacity + floor((t-s)·Limit/Period) units; the
// report gives every ALLOW that ends an interval over that bound and the
// largest excess. It also feeds the known arrivals, in decision order, to an
// exact bucket and reports how much less the history admitted
// (under-admission, which is safe but costs availability).
//
//	h := []check.Operation{{Client: 0, Call: 1, Return: 2, Cost: 1, Outcome: check.Allowed, DecidedAt: 1}}
//	if ok, info := check.CheckLinearizable(l, h); !ok {
//		_ = check.Visualize(l, info, "history.html")
//	}
//	if r := check.CheckAdmission(l, h); !r.OK() {
//		log.Print(r)
//	}
package check
