//go:build race

package h1

// raceEnabled: the tests run under the race detector, whose scheduler
// runs ready goroutines in an order of its own choosing.
const raceEnabled = true
