package balance

import (
	"math/rand/v2"
	"testing"
)

// modulus gives a % d for every 32-bit a and d: the edges, and a million
// pairs drawn at random.
func TestModulusIsRemainder(t *testing.T) {
	edges := []uint32{0, 1, 2, 3, 7, 64, 1000, 1 << 16, 1<<31 - 1, 1 << 31, 1<<32 - 2, 1<<32 - 1}
	check := func(a, d uint32) {
		if got, want := newModulus(d).of(a), uint64(a%d); got != want {
			t.Fatalf("%d mod %d: %d, want %d", a, d, got, want)
		}
	}
	for _, d := range edges[1:] {
		for _, a := range edges {
			check(a, d)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		d := r.Uint32()
		if r.IntN(2) == 0 {
			d >>= r.IntN(32) // small divisors as often as large ones
		}
		if d == 0 {
			d = 1
		}
		check(r.Uint32(), d)
	}
}
