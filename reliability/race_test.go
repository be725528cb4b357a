//go:build race

package reliability_test

// raceEnabled: the suite runs under the race detector, and so does the
// rotor it starts.
const raceEnabled = true
