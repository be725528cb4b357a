package balance

import (
	"math/bits"
	"sync/atomic"
)

// RoundRobin sends the i-th request to endpoint i mod N: no state but one
// atomic counter, blind to load. Unavailable endpoints are skipped, and the
// turns skipped are consumed, so the next request starts after the one
// chosen and the endpoint after a dead one does not take its share too. A
// pick that finds nothing available takes no turn, so a pool's primaries
// and backups can share one counter.
type RoundRobin struct {
	next atomic.Uint64 // survives rebuilds
}

var _ Policy = (*RoundRobin)(nil)

// Name returns "round_robin".
func (*RoundRobin) Name() string { return "round_robin" }

// Build returns a picker over s.
func (rr *RoundRobin) Build(s *Set) Picker {
	return &rrPicker{set: s, next: &rr.next, mod: newModulus(uint32(s.Len()))}
}

type rrPicker struct {
	set  *Set
	next *atomic.Uint64
	mod  modulus // of the set's size
}

func (p *rrPicker) Pick(Request) (*Endpoint, error) {
	eps := p.set.endpoints
	n := uint64(len(eps))
	if n == 0 {
		return nil, ErrNoEndpoint
	}
	start := p.mod.of(uint32(p.next.Add(1) - 1))
	for i := range n {
		j := start + i
		if j >= n {
			j -= n
		}
		if ep := eps[j]; p.set.Available(ep) {
			if i > 0 {
				p.next.Add(i)
			}
			return ep, nil
		}
	}
	p.next.Add(^uint64(0)) // give the turn back
	return nil, ErrNoEndpoint
}

// Random picks uniformly among available endpoints. Like round robin on
// average, worse in the short run, but it needs no shared counter.
type Random struct{}

var _ Policy = Random{}

// Name returns "random".
func (Random) Name() string { return "random" }

// Build returns a picker over s.
func (Random) Build(s *Set) Picker { return randomPicker{s} }

type randomPicker struct{ set *Set }

func (p randomPicker) Pick(Request) (*Endpoint, error) {
	if ep := randomAvailable(p.set); ep != nil {
		return ep, nil
	}
	return nil, ErrNoEndpoint
}

// modulus takes remainders by a divisor fixed when it was made with a
// multiplication and no division (Lemire, Kaser and Kurz, "Faster
// remainder by direct computation", 2019): exact for every 32-bit
// dividend and divisor. A 64-bit division was more than a quarter of
// round robin's picker. Round robin takes its counter's low 32 bits, so
// once in 2^32 picks, where the counter wraps them, one endpoint's turn
// comes early.
type modulus struct {
	m uint64 // 2^64 / d, rounded up
	d uint64
}

func newModulus(d uint32) modulus {
	if d == 0 {
		return modulus{}
	}
	return modulus{m: ^uint64(0)/uint64(d) + 1, d: uint64(d)}
}

// of returns a mod d.
func (m modulus) of(a uint32) uint64 {
	hi, _ := bits.Mul64(m.m*uint64(a), m.d)
	return hi
}
