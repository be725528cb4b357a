package balance

import (
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
func (rr *RoundRobin) Build(s *Set) Picker { return &rrPicker{set: s, next: &rr.next} }

type rrPicker struct {
	set  *Set
	next *atomic.Uint64
}

func (p *rrPicker) Pick(Request) (*Endpoint, error) {
	eps := p.set.endpoints
	n := uint64(len(eps))
	if n == 0 {
		return nil, ErrNoEndpoint
	}
	start := p.next.Add(1) - 1
	for i := range n {
		if ep := eps[(start+i)%n]; p.set.Available(ep) {
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

// WeightedLeastConn is least connections with capacity: the endpoint with
// the least (in-flight + 1) / weight wins, so an idle endpoint of weight 2
// is preferred to an idle one of weight 1, and a busy big one takes twice
// the requests of a small one. It scans every endpoint from a random
// start and keeps the first least loaded, so ties are broken at random.
type WeightedLeastConn struct{}

var _ Policy = WeightedLeastConn{}

// Name returns "weighted_least_conn".
func (WeightedLeastConn) Name() string { return "weighted_least_conn" }

// Build returns a picker over s.
func (WeightedLeastConn) Build(s *Set) Picker { return wlcPicker{s} }

type wlcPicker struct{ set *Set }

func (p wlcPicker) Pick(Request) (*Endpoint, error) {
	return endpointAt(p.set, scanLeast(p.set, nil, true))
}
