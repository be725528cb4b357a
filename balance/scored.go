package balance

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
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

// bestEvery is how many picks pass, on average, before the best latency
// and the largest weight are counted again over every endpoint; with more
// endpoints than that, as many picks as endpoints, so that the recount
// costs O(1) a pick. A pick recounts with probability 1/max(bestEvery, N),
// drawn from the set's random source: a count of picks was one more
// atomic write a pick, on a word every core shares. Outcomes lower the best at once and picks
// raise the largest weight, so only a best endpoint that has slowed down
// waits for the recount.
const bestEvery = 16

type scoredPicker struct {
	set   *Set
	gamma float64
	// best is the float64 bits of the reference latency, seconds: the
	// lowest latency EWMA among the available endpoints, 0 while one of
	// them is idle and unknown (so that it is picked first), +Inf while
	// none is known.
	best atomic.Uint64
	// settled: at the last recount every available endpoint was known.
	// Until then an outcome (dirty) brings the recount forward, so that
	// an unknown endpoint stops weighing as the best once it is known.
	settled atomic.Bool
	dirty   atomic.Bool
	// top is the float64 bits of the largest weight at the last recount,
	// raised when a pick finds one larger: what rejection sampling
	// accepts against.
	top atomic.Uint64
}

var _ Observer = (*scoredPicker)(nil)

// Done lowers the best latency at once when an outcome beats it, and
// brings the recount forward when an endpoint's first outcome has come.
func (p *scoredPicker) Done(ep *Endpoint) {
	e := ep.State.Estimates()
	if e.Outcomes == 1 && !p.settled.Load() {
		p.dirty.Store(true)
	}
	if e.Measured != 0 {
		storeIf(&p.best, e.Latency, func(v, old float64) bool { return v < old })
	}
}

// storeIf stores v as a's float64 when better(v, current), retrying
// against concurrent stores.
func storeIf(a *atomic.Uint64, v float64, better func(v, old float64) bool) {
	for {
		old := a.Load()
		if !better(v, math.Float64frombits(old)) || a.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// reference returns the best latency and the largest weight, recounted
// when the pick's draw says so (about every max(bestEvery, N) picks),
// while none is known, and after an outcome while some endpoint is
// unknown.
func (p *scoredPicker) reference(now int64, drawn bool) (best, top float64) {
	s := p.set
	best, top = math.Float64frombits(p.best.Load()), math.Float64frombits(p.top.Load())
	due := drawn || math.IsInf(best, 1) || !p.settled.Load() && p.dirty.Swap(false)
	if !due {
		return best, top
	}
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
		case e.Measured != 0:
			best = min(best, e.Latency)
		}
	}
	top = 0
	for i := range s.states {
		if st := &s.states[i]; st.Available(s.clock, st.max) {
			top = max(top, p.weight(s.endpoints[i], now, best))
		}
	}
	p.best.Store(math.Float64bits(best))
	p.top.Store(math.Float64bits(top))
	p.settled.Store(settled)
	return best, top
}

// weight is (success x relative latency x cost factor)^gamma, at most 1.
func (p *scoredPicker) weight(ep *Endpoint, now int64, best float64) float64 {
	e, inflight := ep.State.Estimates(), ep.State.Inflight()
	if e.Outcomes == 0 && inflight > 0 {
		return 0 // unknown, and its first request is out
	}
	w := e.Success
	if ep.factor != 0 {
		w *= ep.factor
	}
	if e.Measured != 0 && !math.IsInf(best, 1) {
		lat := e.Latency
		if excess := lat - best; excess > 0 {
			tau := ep.peakDecay()
			// Under a hundredth of tau the fading is under 1%: not worth
			// an exponential on every pick of a busy endpoint.
			if age := time.Duration(now - e.Measured); tau > 0 && age > tau/100 {
				lat = best + excess*math.Exp(-float64(age)/float64(tau))
			}
		}
		// The requests already waiting on it will be answered first: a
		// request sent now expects its latency once for each, and once
		// for itself (as peak_ewma weighs it).
		lat *= float64(inflight + 1)
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
const rejectionTries = 16

// Pick draws in proportion to the weights. It first tries rejection
// sampling: draw an endpoint uniformly and accept it with probability its
// weight over the largest weight (known from the last recount, raised
// whenever a draw finds one larger). Accepted draws are proportional to
// the weights, and with fair weights the first or second draw is
// accepted: O(1) however many endpoints there are. If rejectionTries
// draws are all refused (most endpoints unavailable, or weights very
// uneven), an exact O(N) draw decides; that keeps the distribution exact,
// since it too is proportional. When every available endpoint weighs 0
// (all failing, none yet open) there is no evidence to prefer any, and it
// spreads evenly. One random number decides the recount, the first draw
// and its acceptance; each further draw takes one more.
func (p *scoredPicker) Pick(r Request) (*Endpoint, error) {
	s := p.set
	now := s.now(r.At)
	n := len(s.states)
	d := roll(s.rand)
	best, top := p.reference(now, d.intn(max(bestEvery, n)) == 0)
	if n > 0 && top > 0 {
		for try := range rejectionTries {
			if try > 0 {
				d = roll(s.rand)
			}
			i := d.intn(n)
			if st := &s.states[i]; !st.Available(s.clock, st.max) {
				continue
			}
			w := p.weight(s.endpoints[i], now, best)
			if w >= top {
				storeIf(&p.top, w, func(v, old float64) bool { return v > old })
				return s.endpoints[i], nil
			}
			if d.float()*top < w {
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
