// Package e2e holds the end-to-end tests of quorate bench: they build the
// quorate binary from this tree and run "quorate bench --local 3" as a user
// would, checking its exit status, its JSON report, and that it leaves no
// process behind. It has no code of its own.
package e2e
