package h1

import "testing"

// SetInHandBudget sets the bytes of bodies connections may hold while
// they read them before their handlers run, for the length of t.
func SetInHandBudget(t testing.TB, n int64) {
	old := inHandBudget
	inHandBudget = n
	t.Cleanup(func() { inHandBudget = old })
}

// MaxInHand is the longest body read before its handler runs.
const MaxInHand = maxInHand
