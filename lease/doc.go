// Package lease is a node's lease table: it decides LEASED checks from budget
// the node took ahead of time from the owning shard (leases and credits), and
// sizes, renews and returns that budget.
//
// A lease is an fsm Grant, replicated like any take; a credit (fsm
// OpCredit) covers the first few units of every bucket of one limit name
// that a shard did not hold when it granted the credit.
//
// The table reaches shards only through a [Submitter] (submit ops to a
// shard, get the state machine's results and time), reports through
// [Metrics], and reads deadlines on the [Config]'s clock, so it runs
// against an in-memory state machine in tests as it does in a cluster.
// Routing a key to its shard, building answers and fail modes are the
// caller's (package cluster).
//
// Sizing rule. Each bucket's entry tracks its spend rate (an EWMA over
// renewal rounds). Right after a grant a node aims to hold its expected
// demand over the next renewal interval plus a reserve of ¾ of a lease
// lifetime (want = rate × (RenewInterval + ¾·TTL), at least 1, at most the
// bucket's capacity), on top of its low-water mark: the reserve plus two
// grant round trips of demand. It renews in the background once its budget
// falls below the low-water mark, or once its lease would end within two
// rounds plus four grant latencies (at most 0.45·TTL), and asks for the
// difference between that level and what it holds (at least 1: a grant also
// extends the deadline). The reserve is what lets
// a node keep answering through a shard leader's election without a pause;
// it is held only while grants are fully satisfied: when a bucket is scarce
// (a grant gave less than asked), reserves would idle budget that other
// nodes need now, so nodes ask for the next interval's demand only. The shard grants
// min(asked, available, capacity ÷ holders): a fair share across the nodes
// that hold leases on the bucket, in the spirit of Doorman's proportional
// share. A node whose demand drops holds more than that level at its next
// renewal, and returns the excess in the renewal's own Raft entry (up to
// what its current lease granted); a bucket idle for a lease lifetime is
// returned whole.
//
// Safety. Budget is deducted in the state machine before it is spent, and a
// node spends a lease only until its local deadline: the time it sent the
// request plus the lease's lifetime as the state machine granted it, less a
// margin (a tenth of the lifetime). So the cluster never admits more than
// the limit over a run. Credits are charged the same way, before they are
// spent: the state machine starts each bucket that comes into being below
// capacity by the live credits' allowances (credit.go here, and
// fsm/credit.go for the argument).
//
// Stranding. A node that dies strands at most the budget it held (≤ one
// fair share plus what it had not spent of the previous one) for at most
// the lease TTL: under-admission, never over. A credit strands nothing.
// When the shard is unavailable the node keeps spending what it holds
// ("safe mode"); then its caller follows each item's fail mode.
//
// Hot path. Entries live in a table sharded by key hash; a spend is a
// read-locked map lookup in one shard and a compare-and-swap on the entry's
// budget: no RPC, no lock shared across keys, no allocation.
package lease
