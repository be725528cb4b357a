package balance

import (
	"fmt"
	"math"
)

// MaxChoices is the most choices P2C and PeakEWMA may draw.
const MaxChoices = 16

// P2C is the power of d random choices (Mitzenmacher 1996; Azar et al.
// 1994): draw d distinct available endpoints at random and send the request
// to the one with the fewest in flight. Two choices cut the fullest
// endpoint's load from about ln n / ln ln n to about ln ln n / ln 2, reading
// two counters instead of N; and with stale counts (several balancer
// instances) it degrades gracefully where least-conn herds.
type P2C struct {
	choices int // immutable after NewP2C
}

var _ Policy = (*P2C)(nil)

// NewP2C returns a policy of d choices; 0 means 2. One choice is plain
// random, kept for comparison.
func NewP2C(d int) (*P2C, error) {
	if d == 0 {
		d = 2
	}
	if d < 1 || d > MaxChoices {
		return nil, fmt.Errorf("choices: must be between 1 and %d (got %d)", MaxChoices, d)
	}
	return &P2C{choices: d}, nil
}

// Name returns "p2c".
func (*P2C) Name() string { return "p2c" }

// Choices returns d.
func (p *P2C) Choices() int { return p.choices }

// Build returns a picker over s.
func (p *P2C) Build(s *Set) Picker {
	return &p2cPicker{set: s, d: p.choices}
}

type p2cPicker struct {
	set *Set
	d   int
}

func inflightCost(ep *Endpoint) float64 { return float64(ep.State.Inflight()) }

func (p *p2cPicker) Pick(Request) (*Endpoint, error) {
	s := p.set
	if p.d == 2 {
		if i, j, ok := drawTwo(s); ok {
			if s.states[j].Inflight() < s.states[i].Inflight() {
				return s.endpoints[j], nil
			}
			return s.endpoints[i], nil
		}
	}
	if ep := chooseBest(s, p.d, inflightCost); ep != nil {
		return ep, nil
	}
	return nil, ErrNoEndpoint
}

// drawTwo is two choices' common case without chooseBest's loop: two
// distinct indices from one random number, i uniform and j uniform over the rest,
// both available. When either is not (or there are fewer than two
// endpoints), ok is false and the caller takes the general way, which
// draws again.
func drawTwo(s *Set) (i, j int, ok bool) {
	n := len(s.states)
	if n < 2 {
		return 0, 0, false
	}
	d := roll(s.rand)
	i = d.intn(n)
	j = d.intn(n - 1)
	if j >= i {
		j++
	}
	a, b := &s.states[i], &s.states[j]
	return i, j, a.Available(s.clock, a.max) && b.Available(s.clock, b.max)
}

// chooseBest draws up to d distinct available endpoints at random and
// returns the cheapest, the first drawn on ties. When draws keep finding
// unavailable endpoints it falls back to the cheapest of all available.
func chooseBest(s *Set, d int, cost func(*Endpoint) float64) *Endpoint {
	n := len(s.endpoints)
	if n == 0 {
		return nil
	}
	var drawn [MaxChoices]int
	got := 0
	var best *Endpoint
	bestCost := math.Inf(1)
	for tries := 0; got < min(d, n) && tries < 4*d; tries++ {
		i := intn(s.rand, n)
		dup := false
		for _, j := range drawn[:got] {
			dup = dup || i == j
		}
		if dup {
			continue
		}
		drawn[got] = i
		got++
		ep := s.endpoints[i]
		if !s.Available(ep) {
			continue
		}
		if c := cost(ep); best == nil || c < bestCost {
			best, bestCost = ep, c
		}
	}
	if best != nil {
		return best
	}
	for _, ep := range s.endpoints {
		if s.Available(ep) {
			if c := cost(ep); best == nil || c < bestCost {
				best, bestCost = ep, c
			}
		}
	}
	return best
}

// PeakEWMA is the latency-aware policy of Finagle and linkerd: each
// endpoint's cost is a peak-sensitive EWMA of its latency times its
// in-flight requests plus one, and a pick takes the cheaper of two random
// choices. A latency spike raises the estimate at once; a quiet spell
// decays it, with a time constant (health.Config.PeakDecay), so a slow
// endpoint is tried again later. As in Finagle's PeakEwma, an endpoint
// with no measure yet costs nothing while idle, so a new endpoint is tried
// at once, and a prohibitive penalty while its first request is pending:
// an endpoint nobody has timed yet gets one request at a time until it
// answers, not half the burst because its cost reads zero.
type PeakEWMA struct {
	choices int // immutable after NewPeakEWMA
}

var _ Policy = (*PeakEWMA)(nil)

// NewPeakEWMA returns the policy with d choices; 0 means 2.
func NewPeakEWMA(d int) (*PeakEWMA, error) {
	p, err := NewP2C(d)
	if err != nil {
		return nil, err
	}
	return &PeakEWMA{choices: p.choices}, nil
}

// Name returns "peak_ewma".
func (*PeakEWMA) Name() string { return "peak_ewma" }

// Build returns a picker over s.
func (p *PeakEWMA) Build(s *Set) Picker {
	return &peakPicker{set: s, d: p.choices}
}

type peakPicker struct {
	set *Set
	d   int
}

// peakFloor keeps a measured endpoint's cost above zero, so that
// in-flight counts still break ties when latencies round to nothing.
const peakFloor = 1e-6

// unmeasuredPenalty is the cost of an endpoint with no latency measured
// and requests pending: above any latency an endpoint can show, so every
// measured endpoint is preferred until the first answer arrives. (Finagle
// uses Long.MaxValue >> 16 nanoseconds, about 39 hours.)
const unmeasuredPenalty = 1e9

// peakCost is an endpoint's peak-EWMA cost: its latency estimate times
// its pending requests plus one; without an estimate, 0 when idle and the
// penalty (plus its pending count, to spread a burst) when not.
func peakCost(latency float64, measured bool, inflight int64) float64 {
	if !measured {
		if inflight > 0 {
			return unmeasuredPenalty + float64(inflight)
		}
		return 0
	}
	return max(latency, peakFloor) * float64(inflight+1)
}

func (p *peakPicker) Pick(r Request) (*Endpoint, error) {
	s := p.set
	now := s.now(r.At)
	cost := func(ep *Endpoint) float64 {
		lat, measured := ep.peakLatencyAt(now)
		return peakCost(lat, measured, ep.State.Inflight())
	}
	if p.d == 2 {
		if i, j, ok := drawTwo(s); ok {
			if a, b := s.endpoints[i], s.endpoints[j]; cost(b) < cost(a) {
				return b, nil
			}
			return s.endpoints[i], nil
		}
	}
	if ep := chooseBest(s, p.d, cost); ep != nil {
		return ep, nil
	}
	return nil, ErrNoEndpoint
}
