//go:build race

package proxy

// raceEnabled: the tests run under the race detector, whose scheduler
// runs ready goroutines in an order of its own choosing.
const raceEnabled = true
