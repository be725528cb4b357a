package proxy

// SetAheadBudget sets the bytes bodies read ahead may hold at once, and
// returns what puts it back.
func SetAheadBudget(n int64) (restore func()) {
	old := aheadBudget
	aheadBudget = n
	return func() { aheadBudget = old }
}
