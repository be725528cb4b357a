package balance

import (
	"math"
	"math/bits"
	"testing"
)

// Two draws from one number are the digits of one draw over their
// product: intn(n) then intn(m) is (k/m, k%m) where k = floor(x*n*m), so
// every pair is as likely as every other. The test puts u at each k's
// first number and the one before it (worked out by hand for k = 1, n = 5,
// m = 7: u = ceil(2^64/35) gives (0, 1), one less gives (0, 0)), and at
// the middle of each k, where what is left for the last draw is one half.
func TestDiceDigits(t *testing.T) {
	const n, m = 5, 7
	const total = n * m
	first := func(num, den uint64) uint64 { // ceil(num * 2^64 / den), num < den
		q, r := bits.Div64(num, 0, den)
		if r != 0 {
			q++
		}
		return q
	}
	for k := uint64(0); k < total; k++ {
		d := dice{first(k, total)}
		if i, j := d.intn(n), d.intn(m); uint64(i) != k/m || uint64(j) != k%m {
			t.Fatalf("k=%d: got (%d, %d), want (%d, %d)", k, i, j, k/m, k%m)
		}
		if k > 0 {
			d := dice{first(k, total) - 1}
			if i, j := d.intn(n), d.intn(m); uint64(i) != (k-1)/m || uint64(j) != (k-1)%m {
				t.Fatalf("k=%d, the number before: got (%d, %d), want (%d, %d)", k, i, j, (k-1)/m, (k-1)%m)
			}
		}
		d = dice{first(2*k+1, 2*total)}
		d.intn(n)
		d.intn(m)
		if f := d.float(); math.Abs(f-0.5) > 1e-9 {
			t.Fatalf("k=%d: the middle left %v for the last draw, want 0.5", k, f)
		}
	}
}

// Over a seeded source, an index and a second index over the rest, as
// two choices draws them, land on every ordered pair about equally
// often: 64 x 63 pairs, 200 draws each on average, each count within
// 35% of it (five standard deviations is 71 of 200).
func TestDicePairsEven(t *testing.T) {
	const n = 64
	r := NewSeededRand(7)
	counts := make([]int, n*n)
	const draws = 200 * n * (n - 1)
	for range draws {
		d := roll(r)
		i, j := d.intn(n), d.intn(n-1)
		if j >= i {
			j++
		}
		counts[i*n+j]++
	}
	for i := range n {
		for j := range n {
			c := counts[i*n+j]
			if i == j {
				if c != 0 {
					t.Fatalf("(%d, %d) drawn %d times: the two must differ", i, j, c)
				}
				continue
			}
			if c < 130 || c > 270 {
				t.Fatalf("(%d, %d) drawn %d times, want 200 +- 70", i, j, c)
			}
		}
	}
}
