// Package chaos is quorate's fault-injection harness: it starts a cluster of
// real `quorate agent` processes, each on its own loopback address, runs a
// workload of strict and leased checks against it while a seeded nemesis
// kills, pauses, partitions and skews the clocks of nodes, and then judges
// the recorded histories: linearizability and admission of strict checks
// (package check), a prefix bound on leased admissions, availability gaps,
// and durability across a full-cluster kill and restart.
//
// It exists as its own package because it drives the binary from outside,
// as an operator would, rather than linking the cluster in: faults such as
// SIGKILL and SIGSTOP need processes, and partitions need addresses.
//
// The same seed gives the same schedule of fault kinds, targets and
// timings, so a failing run can be replayed (see Config.ReplayCommand).
// docs/chaos.md gives the design: address plan, fault kinds, models.
package chaos
