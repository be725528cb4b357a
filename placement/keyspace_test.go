package placement_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rotor-lb/rotor/placement"
)

func TestKeySpaceSharesSumToOne(t *testing.T) {
	ns := nodes(letters(37)...)
	ps := all(t, ns)
	for _, name := range []string{"ring", "ring-md5", "maglev", "jump", "modn"} {
		ks, ok := ps[name].(placement.KeySpacer)
		if !ok {
			t.Fatalf("%s is not a KeySpacer", name)
		}
		shares := ks.KeySpace()
		if len(shares) != len(ns) {
			t.Fatalf("%s: %d shares for %d nodes", name, len(shares), len(ns))
		}
		var sum float64
		for _, s := range shares {
			if s <= 0 {
				t.Errorf("%s: a share of %g", name, s)
			}
			sum += s
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: shares sum to %.12f", name, sum)
		}
	}
}

// The jump-hash paper measures the Karger ring over 1,000 buckets by the
// standard error of each bucket's share of the key space: 9.97% with 100
// points per bucket and 3.16% with 1,000, about 1/sqrt(points).
func TestRingKeySpaceMatchesJumpPaper(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a ring of a million points")
	}
	for _, tc := range []struct {
		vnodes    int
		published float64
	}{{100, 0.0997}, {1000, 0.0316}} {
		ns := nodes(letters(1000)...)
		r, err := placement.NewRing(ns, placement.RingOptions{VNodes: tc.vnodes})
		must(t, err)
		sp := placement.SpreadOfShares(ns, r.KeySpace())
		if math.Abs(sp.StddevOverMean-tc.published)/tc.published > 0.08 {
			t.Errorf("%d points per bucket: standard error %.4f, paper %.4f", tc.vnodes, sp.StddevOverMean, tc.published)
		}
	}
}

// Jump divides the key space evenly to within rounding: far below what
// any sample of keys could show.
func TestJumpKeySpaceIsEven(t *testing.T) {
	for _, n := range []int{2, 10, 1000} {
		j, err := placement.NewJump(nodes(letters(n)...))
		must(t, err)
		sp := placement.SpreadOfShares(j.Nodes(), j.KeySpace())
		if sp.StddevOverMean > 1e-5 || sp.MaxOverMean > 1+1e-5 {
			t.Errorf("n=%d: key-space spread max/mean %.9f, stddev/mean %.2g", n, sp.MaxOverMean, sp.StddevOverMean)
		}
	}
}

// The computed shares are what JumpHash does: with buckets whose shares
// the rounding makes unequal (2^31 is not a multiple of 3 or 7), random
// 64-bit keys fall on each bucket as often as its share says, to within
// sampling error.
func TestJumpKeySpaceMatchesSampling(t *testing.T) {
	const samples = 2_000_000
	rng := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{3, 7} {
		j, err := placement.NewJump(nodes(letters(n)...))
		must(t, err)
		shares := j.KeySpace()
		counts := make([]int, n)
		for range samples {
			counts[placement.JumpHash(rng.Uint64(), int32(n))]++
		}
		for b, c := range counts {
			p := shares[b]
			sigma := math.Sqrt(samples * p * (1 - p))
			if d := math.Abs(float64(c) - samples*p); d > 5*sigma {
				t.Errorf("n=%d bucket %d: %d of %d keys, share says %.0f (%.1f sigma off)", n, b, c, samples, samples*p, d/sigma)
			}
		}
	}
}

// Maglev's balance is its table: every node's slots within one round of
// the fair share, as the paper measures it.
func TestMaglevKeySpaceIsItsTable(t *testing.T) {
	ns := nodes(letters(100)...)
	m, err := placement.NewMaglev(ns, placement.MaglevOptions{})
	must(t, err)
	shares := m.KeySpace()
	for i, s := range shares {
		slots := s * float64(m.TableSize())
		if math.Abs(slots-math.Round(slots)) > 1e-6 {
			t.Fatalf("node %d: %.3f slots is not a whole number", i, slots)
		}
	}
	sp := placement.SpreadOfShares(m.Nodes(), shares)
	fair := float64(m.TableSize()) / 100
	if sp.MaxOverMean > (fair+1)/fair {
		t.Errorf("max/mean %.5f: some node has more than one slot over its fair %.1f", sp.MaxOverMean, fair)
	}
}

func TestModNKeySpace(t *testing.T) {
	m, err := placement.NewModN(nodes("a", "b", "c"), placement.MD5)
	must(t, err)
	shares := m.KeySpace()
	// 2^32 = 3*1431655765 + 1: node 0 gets the one extra value.
	want := []float64{1431655766 / math.Exp2(32), 1431655765 / math.Exp2(32), 1431655765 / math.Exp2(32)}
	for i := range want {
		if shares[i] != want[i] {
			t.Errorf("share %d = %.12g, want %.12g", i, shares[i], want[i])
		}
	}
}
