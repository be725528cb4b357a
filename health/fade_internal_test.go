package health

import (
	"math"
	"testing"
)

// fade is e^-x: within 1e-11 where it takes the series, and the
// exponential itself beyond.
func TestFade(t *testing.T) {
	for _, x := range []float64{0, 1e-9, 1e-6, 1e-4, 1e-3, 0.005, 0.01, 0.015, 1.0 / 64, 0.02, 0.5, 1, 10, 700} {
		if got, want := fade(x), math.Exp(-x); math.Abs(got-want) > 1e-11 {
			t.Errorf("fade(%v) = %v, want %v (off by %.3g)", x, got, want, got-want)
		}
	}
	// The series and the exponential meet without a step.
	below := fade(math.Nextafter(1.0/64, 0))
	if at := fade(1.0 / 64); math.Abs(at-below) > 1e-11 {
		t.Errorf("fade steps at 1/64: %v below, %v at", below, at)
	}
}
