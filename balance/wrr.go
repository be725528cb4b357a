package balance

import (
	"slices"
	"sync"
	"sync/atomic"
)

// SmoothWeighted is nginx's smooth weighted round robin. Each pick, every
// available endpoint earns credit equal to its weight; the richest wins
// (the first in config order on ties) and pays back the total earned that
// pick. Weights 5:1:1 give a a b a c a a instead of a a a a a b c, and the
// credits sum to zero after every pick, so the cycle repeats every
// sum-of-weights picks.
//
// A pick is O(1) and takes no lock, as in grpc-go's static stride
// scheduler: the whole cycle is computed once, and a pick takes the next
// turn with one atomic add. The cycle is for the endpoints available:
// when a turn's endpoint is not (draining, down, its breaker open), the
// cycle is computed again without it (one at its in-flight cap for a
// moment keeps its turns, which go to the next), so an unavailable endpoint
// neither earns nor pays and the others stay interleaved; once a cycle,
// availability is checked again, so one that is back takes its turns
// again. The position in the cycle carries across rebuilds, so a weight
// or membership change does not restart with a burst.
//
// Weights are divided by their greatest common divisor; a cycle holds at
// most maxCycle turns, and at most maxCycleWork/N for N endpoints (the
// cost of computing it): larger weights are scaled down to fit, each
// endpoint keeping at least one turn.
type SmoothWeighted struct {
	turn atomic.Uint64 // the next turn, across builds
}

// The bounds of a cycle: its length, and its length times the endpoints
// (the work of computing it, about a millisecond at the bound).
const (
	maxCycle     = 1 << 16
	maxCycleWork = 1 << 22
)

var _ Policy = (*SmoothWeighted)(nil)

// Name returns "weighted_round_robin".
func (*SmoothWeighted) Name() string { return "weighted_round_robin" }

// Build returns a picker over s, continuing the policy's position.
func (w *SmoothWeighted) Build(s *Set) Picker {
	p := &wrrPicker{set: s, turn: &w.turn}
	p.cur.Store(p.cycleFor(nil))
	return p
}

type wrrPicker struct {
	set  *Set
	turn *atomic.Uint64
	cur  atomic.Pointer[wrrCycle]
	mu   sync.Mutex // serialises recomputing the cycle
}

// wrrCycle is one cycle: the turns, as indexes in set.endpoints, for the
// endpoints marked available (avail nil: all of them).
type wrrCycle struct {
	avail []bool
	turns []int32
}

func (p *wrrPicker) Pick(Request) (*Endpoint, error) {
	s := p.set
	for range 3 {
		c := p.cur.Load()
		n := uint64(len(c.turns))
		if n == 0 {
			if p.refresh(c) {
				continue
			}
			return nil, ErrNoEndpoint
		}
		t := p.turn.Add(1) - 1
		if t%n == 0 && c.avail != nil {
			p.refresh(c) // once a cycle: is one that was out back?
		}
		i := c.turns[t%n]
		if st := &s.states[i]; st.Available(s.clock, st.max) {
			return s.endpoints[i], nil
		}
		if s.endpoints[i].Full() {
			continue // at its cap for a moment: it keeps its turns
		}
		p.refresh(c)
	}
	// Availability changing faster than cycles: any available endpoint.
	for i, ep := range s.endpoints {
		if st := &s.states[i]; st.Available(s.clock, st.max) {
			return ep, nil
		}
	}
	return nil, ErrNoEndpoint
}

// refresh computes the cycle again if the endpoints available are not
// those c is for, and reports whether it changed.
func (p *wrrPicker) refresh(c *wrrCycle) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur.Load() != c {
		return true // recomputed meanwhile
	}
	s := p.set
	avail := make([]bool, len(s.endpoints))
	all := true
	for i := range s.endpoints {
		st := &s.states[i]
		avail[i] = st.Available(s.clock, st.max)
		all = all && avail[i]
	}
	if all {
		avail = nil
	}
	if slices.Equal(avail, c.avail) { // nil (all) and a list never have one length
		return false
	}
	p.cur.Store(p.cycleFor(avail))
	return true
}

// cycleFor computes one whole cycle of nginx's algorithm over the
// endpoints avail marks (nil: all).
func (p *wrrPicker) cycleFor(avail []bool) *wrrCycle {
	eps := p.set.endpoints
	var idx []int32
	var w []int64
	g := int64(0)
	for i, ep := range eps {
		if avail != nil && !avail[i] {
			continue
		}
		idx = append(idx, int32(i))
		w = append(w, int64(max(ep.Weight, 1)))
		g = gcd(g, w[len(w)-1])
	}
	if len(idx) == 0 {
		return &wrrCycle{avail: avail}
	}
	total := int64(0)
	for i := range w {
		w[i] /= g
		total += w[i]
	}
	if bound := min(int64(maxCycle), max(int64(maxCycleWork/len(w)), int64(len(w)))); total > bound {
		sum := total
		total = 0
		for i := range w {
			w[i] = max(1, (w[i]*bound+sum/2)/sum)
			total += w[i]
		}
	}
	turns := make([]int32, total)
	credit := make([]int64, len(w))
	for t := range turns {
		best := 0
		for i := range w {
			credit[i] += w[i]
			if credit[i] > credit[best] {
				best = i
			}
		}
		credit[best] -= total
		turns[t] = idx[best]
	}
	return &wrrCycle{avail: avail, turns: turns}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
