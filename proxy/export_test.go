package proxy

import "os"

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

// SetCreateSpool has bodies spool into the files create makes (name: one
// to remove once closed), and returns what puts it back.
func SetCreateSpool(create func() (f *os.File, name string, err error)) (restore func()) {
	old := createSpool
	createSpool = create
	return func() { createSpool = old }
}
