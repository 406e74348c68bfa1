//go:build !race && !mutate

package fsm

// raceScaled is n seeds, or a quarter of them under the race detector.
func raceScaled(n uint64) uint64 { return n }
