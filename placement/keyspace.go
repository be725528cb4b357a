package placement

import (
	"math"
	"math/bits"
)

// KeySpacer is implemented by placers that divide a finite space of key
// hashes among their nodes in a way that can be measured exactly, without
// the noise of sampling keys: the balance the papers report.
type KeySpacer interface {
	Placer
	// KeySpace returns the share of the key space each node owns, in the
	// order of Nodes(); the shares sum to 1. It returns nil when the set
	// is empty or too large to compute.
	KeySpace() []float64
}

var (
	_ KeySpacer = (*Ring)(nil)
	_ KeySpacer = (*Maglev)(nil)
	_ KeySpacer = (*Jump)(nil)
	_ KeySpacer = (*ModN)(nil)
)

// KeySpace is each node's share of the hash space: the arcs that end at
// its points, each from the point before (a key goes to the first point
// past its hash), as the Karger ring is measured in the jump-hash paper.
func (r *Ring) KeySpace() []float64 {
	s := r.snap.Load()
	if len(s.nodes) == 0 {
		return nil
	}
	shares := make([]float64, len(s.nodes))
	if len(s.hashes) == 1 {
		shares[s.owners[0]] = 1
		return shares
	}
	hashBits := r.opts.Hash.bits()
	space := math.Ldexp(1, int(hashBits))
	for i, h := range s.hashes {
		var arc uint64
		if i == 0 {
			// The arc that wraps: from the last point to the end of the
			// space, then from 0 to the first point.
			arc = h - s.hashes[len(s.hashes)-1]
			if hashBits < 64 {
				arc += 1 << hashBits
			}
		} else {
			arc = h - s.hashes[i-1]
		}
		shares[s.owners[i]] += float64(arc) / space
	}
	return shares
}

// KeySpace is each node's share of the table's slots, the measure of the
// Maglev paper. (A key's hash picks a slot modulo M; over 2^64 hashes the
// slots differ in likelihood by less than M/2^64.)
func (m *Maglev) KeySpace() []float64 {
	s := m.snap.Load()
	if len(s.nodes) == 0 {
		return nil
	}
	shares := make([]float64, len(s.nodes))
	for _, o := range s.table {
		shares[o]++
	}
	for i := range shares {
		shares[i] /= float64(len(s.table))
	}
	return shares
}

// maxJumpSpace bounds the nodes Jump.KeySpace computes for: the
// computation is quadratic in the node count.
const maxJumpSpace = 10000

// KeySpace is each bucket's share of the 2^64 key hashes, computed from
// the jump recurrence rather than by sampling: from bucket b a key's next
// jump reaches at least m exactly when its 31-bit draw r satisfies
// (b+1)*2^31/(r+1) >= m, which floor((b+1)*2^31/m) of the 2^31 draws do.
// With each step's draw taken as uniform (the paper's model of its linear
// congruential generator), a bucket's share is the chance the key visits
// it times the chance its next jump leaves the set. What remains of the
// ideal 1/N is the rounding of those counts, under 2^-31 a step. Nil
// beyond 10,000 nodes.
func (j *Jump) KeySpace() []float64 {
	nodes := *j.snap.Load()
	n := len(nodes)
	if n == 0 || n > maxJumpSpace {
		return nil
	}
	const draws = 1 << 31
	// reach(b, m): the share of draws that take a key at b to m or beyond.
	reach := func(b, m int) float64 {
		return float64(uint64(b+1)*draws/uint64(m)) / draws
	}
	visit := make([]float64, n)
	visit[0] = 1
	for b := range n {
		for m := b + 1; m < n; m++ {
			visit[m] += visit[b] * (reach(b, m) - reach(b, m+1))
		}
	}
	shares := make([]float64, n)
	for b := range n {
		shares[b] = visit[b] * reach(b, n)
	}
	return shares
}

// KeySpace is each node's share of the hash values h with h mod N its
// number: floor(2^k/N), one more for the first 2^k mod N nodes.
func (m *ModN) KeySpace() []float64 {
	nodes := *m.snap.Load()
	n := uint64(len(nodes))
	if n == 0 {
		return nil
	}
	shares := make([]float64, n)
	if n == 1 {
		shares[0] = 1
		return shares
	}
	hashBits := m.hash.bits()
	var q, rem uint64
	if hashBits == 64 {
		q, rem = bits.Div64(1, 0, n)
	} else {
		q, rem = (1<<hashBits)/n, (1<<hashBits)%n
	}
	space := math.Ldexp(1, int(hashBits))
	for i := range shares {
		c := q
		if uint64(i) < rem {
			c++
		}
		shares[i] = float64(c) / space
	}
	return shares
}

// SpreadOfShares measures how evenly the shares of a key space (one per
// node, in the order of nodes) fall, each scaled by the node's weight as
// SpreadOf scales key counts. Keys is left nil.
func SpreadOfShares(nodes []Node, shares []float64) Spread {
	var sp Spread
	if len(nodes) == 0 || len(shares) != len(nodes) {
		return sp
	}
	var totalWeight, total float64
	for i, n := range nodes {
		totalWeight += float64(n.weight())
		total += shares[i]
	}
	if total == 0 {
		return sp
	}
	var sq float64
	for i, n := range nodes {
		r := shares[i] / total / (float64(n.weight()) / totalWeight)
		sp.MaxOverMean = max(sp.MaxOverMean, r)
		sq += (r - 1) * (r - 1)
	}
	sp.StddevOverMean = math.Sqrt(sq / float64(len(nodes)))
	return sp
}
