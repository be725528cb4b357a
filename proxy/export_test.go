package proxy

// SetAheadBudget sets the bytes bodies read ahead may hold at once, and
// returns what puts it back.
func SetAheadBudget(n int64) (restore func()) {
	old := aheadBudget
	aheadBudget = n
	return func() { aheadBudget = old }
}

// SetSpoolBudget sets the bytes bodies spooled to disk may hold at once,
// and returns what puts it back.
func SetSpoolBudget(n int64) (restore func()) {
	old := spoolBudget
	spoolBudget = n
	return func() { spoolBudget = old }
}

// SpoolHeld is the bytes of the spool budget bodies hold now.
func SpoolHeld() int64 { return spoolHeld.Load() }
