//go:build !race

package h1

const raceEnabled = false
