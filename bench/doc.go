// Package bench is the core of quorate's load tool (quorate bench): the
// workloads, the load models that drive them, and the recording of what
// came back. Performance claims about quorate are made with this tool, so
// everything here is built to be trusted:
//
//   - The same workload runs against every target through one interface,
//     Driver: quorate in strict or leased mode (package quoratedriver) and
//     the Redis baseline (package redisdriver).
//   - Closed loop (Load.Rate 0): Concurrency clients each send a request,
//     wait for the answer and send the next. Open loop (Load.Rate > 0):
//     requests are scheduled at a fixed rate whatever the answers, and
//     latency is measured from each request's scheduled send time, so a
//     stalled server shows up as queueing instead of being hidden by the
//     clients slowing down (coordinated omission).
//   - Latency goes into HDR histograms (package latency); every check's
//     decision time goes to the admission accountant (package accuracy);
//     CPU time is read from /proc for the server processes and the tool
//     itself (package proccpu).
//   - Execute alternates targets round by round (A B, then B A) so slow
//     drift of the machine affects each target alike, and gives each run
//     fresh buckets, so runs never see each other's state.
//
// A run is bounded by time (Load.Duration), by requests (Load.Requests),
// or both, and always stops by itself.
package bench
