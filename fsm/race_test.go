//go:build race

package fsm

// raceScaled is n seeds, or a quarter of them (at least 2) under the race
// detector: it makes the long property tests about 20 times slower, and
// make test runs with it. Without it they run in full.
func raceScaled(n uint64) uint64 {
	return max(2, n/4)
}
