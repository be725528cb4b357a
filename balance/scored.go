package balance

import (
	"fmt"
	"math"
)

// Scored is article 001's health-weighted choice: each available endpoint
// is drawn with probability proportional to score^gamma, where the score
// is success_ewma x 1/(1 + latency_ewma_s) (Endpoint.Score). Gamma 0 is
// uniform; higher gammas concentrate traffic on the best endpoints. Keep it
// modest: a large gamma commits to whatever looked best first and then
// never learns that a demoted endpoint has recovered, as it sends it
// nothing.
//
// When nothing is available (every breaker open), the pool falls back to
// the whole set in proportion to the scores as if no breaker were open: a
// pool that is all sick still tries the least bad.
type Scored struct {
	gamma float64 // immutable after NewScored
}

var _ Policy = (*Scored)(nil)

// DefaultGamma is Scored's exponent when none is given.
const DefaultGamma = 1.0

// NewScored returns the policy with exponent gamma (>= 0; NaN or a
// negative gamma is an error).
func NewScored(gamma float64) (*Scored, error) {
	if !(gamma >= 0) || math.IsInf(gamma, 0) {
		return nil, fmt.Errorf("gamma: must be zero or positive (got %v)", gamma)
	}
	return &Scored{gamma: gamma}, nil
}

// Name returns "scored".
func (*Scored) Name() string { return "scored" }

// Gamma returns the exponent.
func (s *Scored) Gamma() float64 { return s.gamma }

// Build returns a picker over s.
func (sc *Scored) Build(s *Set) Picker { return &scoredPicker{set: s, gamma: sc.gamma} }

type scoredPicker struct {
	set   *Set
	gamma float64
}

// weight is score^gamma, with the common exponents done without Pow.
func (p *scoredPicker) weight(ep *Endpoint) float64 {
	s := ep.scoreIgnoringBreaker() // available: the breaker admits
	switch p.gamma {
	case 0:
		return 1
	case 1:
		return s
	case 2:
		return s * s
	}
	return math.Pow(s, p.gamma)
}

// rejectionTries bounds the O(1) draws before Pick falls back to an exact
// pass over every endpoint.
const rejectionTries = 8

// Pick draws in proportion to the weights. It first tries rejection
// sampling: draw an endpoint uniformly and accept it with probability equal
// to its weight, which is at most 1 (a score is a product of factors in
// [0, 1], and gamma >= 0). Accepted draws are exactly proportional to the
// weights, and when scores are fair the first or second draw is accepted:
// O(1) however many endpoints there are. If rejectionTries draws are all
// refused (scores all low, or most endpoints unavailable), an exact O(N)
// draw decides; that keeps the distribution exact, since it too is
// proportional. When every available endpoint scores 0 (all failing, none
// yet open) there is no evidence to prefer any, and it spreads evenly.
func (p *scoredPicker) Pick(Request) (*Endpoint, error) {
	s := p.set
	if n := len(s.states); n > 0 {
		for range rejectionTries {
			i := intn(s.rand, n)
			if st := &s.states[i]; !st.Available(s.clock, st.max) {
				continue
			}
			if w := p.weight(s.endpoints[i]); w >= 1 || float(s.rand) < w {
				return s.endpoints[i], nil
			}
		}
	}
	if ep := draw(s, s.Available, p.weight); ep != nil {
		return ep, nil
	}
	return nil, ErrNoEndpoint
}
