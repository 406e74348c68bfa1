//go:build mutate && !race

package fsm

// raceScaled is a tenth of n seeds (at least 2) under make mutate, which
// runs the suite once per mutant: at full length the property tests would
// make fsm's run take hours. The score make mutate reports for fsm is that
// lighter suite's; make test runs the tests in full.
func raceScaled(n uint64) uint64 {
	return max(2, n/10)
}
