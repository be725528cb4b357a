package balance

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/health"
)

// Scored is article 001's health-weighted choice: each available endpoint
// is drawn with probability proportional to its weight^gamma, where the
// weight is the article's product of a success term and a latency term:
//
//	weight = success_ewma x (best + 1ms) / (latency x (in flight + 1) + 1ms)
//
// The latency term is relative to the best latency among the available
// endpoints, not 1/(1 + seconds) as in the article's score: seconds make
// the choice depend on the unit (a 10 ms backend and a 200 ms one score
// 0.99 and 0.83, nearly alike), where a ratio treats a route twenty times
// slower than the best alike at every scale. (Endpoint.Score, what the
// status API shows, stays the article's.) Requests in flight multiply the
// latency, as in peak_ewma: a new request waits behind them, and without
// it a burst would herd onto whichever endpoint answered fastest last.
//
// A latency measured long ago fades toward the best, with the time
// constant of health.Config.PeakDecay: an endpoint that has been left
// alone gets a request again now and then, which is how a demoted endpoint
// that has recovered is found out. An endpoint nothing is known of yet is
// tried first, one request at a time (as Finagle's PeakEwma does): while
// one is idle it is picked, while its first request is out it is left
// alone. An endpoint that has only failed has no latency; its latency term
// is 1 and its success term decides.
//
// Gamma 0 is uniform; the default, 2, sends a route 10x slower than the
// best about 1% of what the best gets, one 3x slower 11%. A large gamma
// commits to whatever looks best and learns of recoveries only through
// the fading.
//
// When nothing is available (every breaker open), the pool falls back to
// the whole set in proportion to the scores as if no breaker were open: a
// pool that is all sick still tries the least bad.
type Scored struct {
	gamma float64 // immutable after NewScored
}

var _ Policy = (*Scored)(nil)

// DefaultGamma is Scored's exponent when none is given.
const DefaultGamma = 2.0

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
func (sc *Scored) Build(s *Set) Picker {
	p := &scoredPicker{set: s, gamma: sc.gamma}
	p.best.Store(math.Float64bits(math.Inf(1)))
	return p
}

// latencyFloor is added to every latency the weight compares, so that
// endpoints answering in microseconds are not told apart by noise.
const latencyFloor = 0.001

// bestEvery is how many picks may pass before the best latency is looked
// for again over every endpoint (outcomes lower it at once; only a best
// endpoint that has slowed down waits for the recount).
const bestEvery = 16

type scoredPicker struct {
	set   *Set
	gamma float64
	// best is the float64 bits of the reference latency, seconds: the
	// lowest latency EWMA among the available endpoints, 0 while one of
	// them is idle and unknown (so that it is picked first), +Inf while
	// none is known.
	best atomic.Uint64
	// settled: at the last recount every available endpoint was known;
	// until then the recount runs on every pick.
	settled atomic.Bool
	picks   atomic.Uint64
}

var _ Observer = (*scoredPicker)(nil)

// Done lowers the best latency at once when an outcome beats it.
func (p *scoredPicker) Done(ep *Endpoint) {
	e := ep.State.Estimates()
	if e.Measured.IsZero() {
		return
	}
	for {
		old := p.best.Load()
		if e.Latency >= math.Float64frombits(old) || p.best.CompareAndSwap(old, math.Float64bits(e.Latency)) {
			return
		}
	}
}

// reference returns the best latency, recounted over the available
// endpoints every bestEvery picks, and on every pick while some endpoint
// is unknown.
func (p *scoredPicker) reference() float64 {
	best := math.Float64frombits(p.best.Load())
	if p.picks.Add(1)%bestEvery != 0 && p.settled.Load() {
		return best
	}
	s := p.set
	best, settled := math.Inf(1), true
	for i := range s.states {
		st := &s.states[i]
		if !st.Available(s.clock, st.max) {
			continue
		}
		switch e := st.Estimates(); {
		case e.Outcomes == 0:
			settled = false
			if st.Inflight() == 0 {
				best = 0
			}
		case !e.Measured.IsZero():
			best = min(best, e.Latency)
		}
	}
	p.best.Store(math.Float64bits(best))
	p.settled.Store(settled)
	return best
}

// weight is (success x relative latency x cost factor)^gamma, at most 1.
func (p *scoredPicker) weight(ep *Endpoint, now time.Time, best float64) float64 {
	e := ep.State.Estimates()
	if e.Outcomes == 0 && ep.State.Inflight() > 0 {
		return 0 // unknown, and its first request is out
	}
	w := e.Success
	if ep.factor != 0 {
		w *= ep.factor
	}
	if !e.Measured.IsZero() && !math.IsInf(best, 1) {
		lat := e.Latency
		if excess := lat - best; excess > 0 {
			tau := health.DefaultPeakDecay
			if ep.tuning != nil {
				tau = ep.tuning.PeakDecay
			}
			if age := now.Sub(e.Measured); age > 0 && tau > 0 {
				lat = best + excess*math.Exp(-float64(age)/float64(tau))
			}
		}
		// The requests already waiting on it will be answered first: a
		// request sent now expects its latency once for each, and once
		// for itself (as peak_ewma weighs it).
		lat *= float64(ep.State.Inflight() + 1)
		w *= min((best+latencyFloor)/(lat+latencyFloor), 1)
	}
	switch p.gamma {
	case 0:
		return 1
	case 1:
		return w
	case 2:
		return w * w
	}
	return math.Pow(w, p.gamma)
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
	now := s.clock.Now()
	best := p.reference()
	if n := len(s.states); n > 0 {
		for range rejectionTries {
			i := intn(s.rand, n)
			if st := &s.states[i]; !st.Available(s.clock, st.max) {
				continue
			}
			if w := p.weight(s.endpoints[i], now, best); w >= 1 || float(s.rand) < w {
				return s.endpoints[i], nil
			}
		}
	}
	weight := func(ep *Endpoint) float64 { return p.weight(ep, now, best) }
	if ep := draw(s, s.Available, weight); ep != nil {
		return ep, nil
	}
	return nil, ErrNoEndpoint
}
