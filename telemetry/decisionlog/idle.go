package decisionlog

// Idle reports whether nothing would read a record: no sink and no live
// tail. A node keeps a logger with no sinks so that `quorate tail` works
// without configuration; while idle, its callers skip building records.
func (l *Logger) Idle() bool {
	return l == nil || len(l.sinks) == 0 && l.subs.n.Load() == 0
}

// Subscribers counts the live tails open now.
func (l *Logger) Subscribers() int {
	if l == nil {
		return 0
	}
	return int(l.subs.n.Load())
}
