// Package topk finds the hottest and most denied bucket keys of each policy
// over sliding windows, in bounded memory, with summaries that merge across
// nodes.
//
// # The sketch and its guarantee
//
// A [Sketch] is the space-saving sketch of Metwally, Agrawal and El Abbadi
// ("Efficient computation of frequent and top-k elements in data streams",
// 2005) with k counters, kept as a min-heap indexed by a map (O(log k) per
// weighted update, no allocation for a key it already counts). Its
// [Summary], and every summary [Merge] makes of such summaries, promises,
// with N the total weight observed:
//
//   - every listed key's true count lies in [Count-Err, Count];
//   - every key not listed has a true count of at most Min;
//   - every entry's Err is at most Min, and Min is at most N/k.
//
// So every key whose true count exceeds N/k is listed, and no count is off
// by more than N/k. Merging summaries of k counters over streams of N1, N2,
// ... observations gives the same promise with N = N1+N2+... (the
// mergeable-summaries construction of Agarwal et al., 2012: a key one
// summary lacks is counted at that summary's Min, as count and as error).
// [Summary.Top] keeps the first two promises by raising Min to the largest
// count it drops (which may pass N/k), so to merge summaries without losing
// accuracy, merge them whole and cut the result.
//
// # Windows
//
// A [Tracker] keeps, per policy, two kinds of counts: [Hits] (every
// check's key, weighted by its cost) and [Denied] (one per denial). Each
// window (default 1m, 5m, 15m and 1h) is cut into slots (default 6: of
// 10s, 50s, 150s and 10m), aligned to the Unix epoch so that the slots of
// different nodes line up. One live sketch per policy and kind counts the
// current shortest slot, so an observation updates one sketch; when the
// slot ends, its summary is frozen and merged up into the current slot of
// each longer window (a cascade: each window's slot is a multiple of the
// shorter's). A window of length W in S slots answers for the slot holding
// now and the S-1 before it: at least the last W-W/S and at most the last
// W. Time is always the caller's: Observe and the queries take now, and a
// clock that goes back counts in the current slot.
//
// # Bounds
//
// A tracker holds at most MaxPolicies policies (default 1000). An
// observation for one more policy is dropped and counted in
// quorate_topk_dropped_total{reason="policies"}, after the tracker has
// first forgotten policies idle for longer than its longest window (at most
// once per slot, or whenever [Tracker.Tick] is called). Mixing several
// policies' keys in one "_other" sketch would rank keys of different limits
// against each other, so the tracker does not. Memory is at most
// MaxPolicies × 2 kinds × (the windows' slots) × K entries, each a key of at
// most MaxKeyLen bytes: with the defaults, 1000 × 2 × 24 × 64 entries (a
// policy holds only the keys it has seen).
package topk
