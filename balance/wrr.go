package balance

import (
	"sync"
)

// SmoothWeighted is nginx's smooth weighted round robin. Each pick, every
// available endpoint earns credit equal to its weight; the richest wins
// (the first in config order on ties) and pays back the total earned that
// pick. Weights 5:1:1 give a a b a c a a instead of a a a a a b c, and the
// credits sum to zero after every pick, so the cycle repeats every
// sum-of-weights picks.
//
// Credits are kept by endpoint name across rebuilds, so a weight change or
// a membership change does not restart the cycle with a burst; an
// unavailable endpoint neither earns nor pays, so the others stay
// interleaved while it is out. A pick is O(N) under one mutex, as in nginx.
type SmoothWeighted struct {
	mu      sync.Mutex
	credits map[string]*int64 // guarded by mu; by endpoint name
}

var _ Policy = (*SmoothWeighted)(nil)

// Name returns "weighted_round_robin".
func (*SmoothWeighted) Name() string { return "weighted_round_robin" }

// Build returns a picker over s, carrying credits over by name. Credits
// of endpoints not in s are kept (a backup set, or a snapshot built aside
// and abandoned, must not reset the running cycle); the map holds one
// counter per name the pool ever had.
func (w *SmoothWeighted) Build(s *Set) Picker {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.credits == nil {
		w.credits = make(map[string]*int64, len(s.endpoints))
	}
	p := &wrrPicker{set: s, mu: &w.mu, credit: make([]*int64, len(s.endpoints))}
	for i, ep := range s.endpoints {
		c := w.credits[ep.Name]
		if c == nil {
			c = new(int64)
			w.credits[ep.Name] = c
		}
		p.credit[i] = c
	}
	return p
}

type wrrPicker struct {
	set    *Set
	mu     *sync.Mutex // the policy's
	credit []*int64    // guarded by mu; aligned with set.endpoints
}

func (p *wrrPicker) Pick(Request) (*Endpoint, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	var total int64
	s := p.set
	eps := s.endpoints
	states, credit := s.states[:len(eps)], p.credit[:len(eps)] // no bounds checks below
	for i, ep := range eps {
		if st := &states[i]; !st.Available(s.clock, st.max) {
			continue
		}
		*credit[i] += int64(ep.Weight)
		total += int64(ep.Weight)
		if best < 0 || *credit[i] > *credit[best] {
			best = i
		}
	}
	if best < 0 {
		return nil, ErrNoEndpoint
	}
	*p.credit[best] -= total
	return p.set.endpoints[best], nil
}
