// Package balance picks an endpoint for each request.
//
// A Pool holds the endpoints and a Policy. Membership and config changes go
// through Configure, on the control plane: they build a new immutable Set
// and a Picker over it, and publish both with one atomic store. Pick, on the
// data plane, loads that snapshot and asks the Picker; it never blocks and
// never takes the control plane's lock (grpc-go's Balancer and Picker).
//
// A pick returns the endpoint and a Done hook: the caller reports the
// outcome, and everything that learns (in-flight counts, the success and
// latency EWMAs, the circuit breaker, sticky tables, bounded loads) learns
// through it. Every policy skips what the one availability predicate,
// Set.Available, rejects; Pool.Pick, the one entry point, walks the
// fallback order (pinned endpoint, panic mode, primaries, backups, least
// bad) so that no caller has to, and counts each step.
//
// Time and randomness are injected (health.Clock, Rand), so the simulator
// drives this very code on virtual time, deterministically, from a seed.
package balance

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/placement"
)

// ErrNoEndpoint means no endpoint can take the request: the pool is empty,
// or every endpoint is draining or full. The proxies answer 503.
var ErrNoEndpoint = errors.New("balance: no endpoint available")

// ErrRejected means a policy refused the request by rule: a sticky
// session's endpoint is full and the pool is set to reject rather than
// break affinity. The proxies answer 503.
var ErrRejected = errors.New("balance: rejected: the pinned endpoint is full")

// Endpoint is one place a request can go, as one snapshot knows it. Its
// fields are immutable; its runtime State is shared by every snapshot the
// endpoint is in. Its configuration (weight, cost, cap, health tuning)
// belongs to the snapshot, so a snapshot built beside a running one
// changes nothing the running one sees.
type Endpoint struct {
	Name        string
	Addr        string // opaque to this package: a URL, host:port, a route
	Weight      int    // >= 1
	Cost        float64
	MaxInflight int64 // 0: no cap
	Backup      bool  // taken only when no primary is available
	State       *health.State

	tuning *health.Config // normalised; nil means the defaults
	factor float64        // 1/(1 + cost_weight x cost); 0 means 1 (no cost)
	pos    int            // its index in the last Set built over it (NewSet); Set.indexOf checks it
}

// Health returns the health tuning requests to the endpoint are admitted
// under.
func (ep *Endpoint) Health() health.Config {
	if ep.tuning == nil {
		return health.Config{}.Normalize()
	}
	return *ep.tuning
}

// Full reports whether the endpoint is at its in-flight cap.
func (ep *Endpoint) Full() bool {
	return ep.MaxInflight > 0 && ep.State.Inflight() >= ep.MaxInflight
}

// Score is the endpoint's health score at now (health.State.Score) times
// its cost factor 1/(1 + cost_weight x cost) (article 001's cost term).
func (ep *Endpoint) Score(now time.Time) float64 { return ep.costed(ep.State.Score(now)) }

// scoreIgnoringBreaker is Score as if the breaker were closed.
func (ep *Endpoint) scoreIgnoringBreaker() float64 { return ep.costed(ep.State.ScoreIgnoringBreaker()) }

func (ep *Endpoint) costed(score float64) float64 {
	if ep.factor == 0 {
		return score
	}
	return score * ep.factor
}

// PeakLatency is the state's peak-EWMA latency under the endpoint's tuning.
func (ep *Endpoint) PeakLatency(now time.Time) (sec float64, measured bool) {
	return ep.State.PeakLatency(now, ep.peakDecay())
}

// peakLatencyAt is PeakLatency at now in unix nanoseconds.
func (ep *Endpoint) peakLatencyAt(now int64) (sec float64, measured bool) {
	return ep.State.PeakLatencyAt(now, ep.peakDecay())
}

// peakDecay is the time constant latency evidence fades with.
func (ep *Endpoint) peakDecay() time.Duration {
	if ep.tuning != nil {
		return ep.tuning.PeakDecay
	}
	return health.DefaultPeakDecay
}

// Snapshot is the state's snapshot with the endpoint's score and peak
// latency, as status pages show them.
func (ep *Endpoint) Snapshot(now time.Time) health.Snapshot {
	snap := ep.State.Snapshot(now)
	snap.Score = ep.Score(now)
	snap.PeakLatency, _ = ep.PeakLatency(now)
	return snap
}

// Policy builds pickers. One Policy value lives as long as the pool's
// config names it, so it is where state that must outlive a membership
// change is kept (a round-robin counter, smooth weights, a sticky table).
type Policy interface {
	// Name is the policy's config name, e.g. "p2c".
	Name() string
	// Build returns a picker over s. It is called on the control plane,
	// one call at a time; the previous picker keeps serving until the new
	// one is published.
	Build(s *Set) Picker
}

// Picker picks from one Set. Pick is called from any number of goroutines
// and must never block. It returns ErrNoEndpoint when nothing it may pick
// is available.
type Picker interface {
	Pick(r Request) (*Endpoint, error)
}

// Observer is implemented by pickers that keep per-request accounting of
// their own (bounded loads): Done is called once for every endpoint the
// picker returned, when its request ends.
type Observer interface {
	Done(ep *Endpoint)
}

// Rand is the random source policies draw from. It must be safe for
// concurrent use.
type Rand interface {
	Uint64() uint64
}

// FastRand is the runtime's per-thread generator: concurrent and lock-free,
// not reproducible. The default.
type FastRand struct{}

// Uint64 returns a random number.
func (FastRand) Uint64() uint64 { return rand.Uint64() }

// SeededRand is a reproducible source: the same seed gives the same
// sequence. A mutex makes it safe for concurrent use.
type SeededRand struct {
	mu  sync.Mutex
	pcg *rand.PCG // guarded by mu
}

// NewSeededRand returns a source seeded with seed.
func NewSeededRand(seed uint64) *SeededRand {
	return &SeededRand{pcg: rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}
}

// Uint64 returns the next number in the sequence.
func (r *SeededRand) Uint64() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pcg.Uint64()
}

// intn returns a number in [0, n) (Lemire's multiply-shift, no division).
func intn(r Rand, n int) int {
	hi, _ := bits.Mul64(r.Uint64(), uint64(n))
	return int(hi)
}

// float returns a number in [0, 1).
func float(r Rand) float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// dice hands out several draws from one random number: u/2^64 is a
// fraction x in [0, 1), and each draw takes its next digit in a mixed
// radix (intn(n) is floor(x*n), and x becomes what is left, x*n - floor(x*n)),
// the way Lemire's multiply-shift takes the first. The digits are uniform
// and independent up to a bias of n/2^64 each; a draw of n leaves about
// 64 - log2(n) bits for the next. A pick that needs an index and a
// coin, or two indices, pays for one call to the source instead of two
// or three.
type dice struct{ u uint64 }

// roll returns dice holding one number from r.
func roll(r Rand) dice { return dice{r.Uint64()} }

// intn returns the next digit, in [0, n).
func (d *dice) intn(n int) int {
	hi, lo := bits.Mul64(d.u, uint64(n))
	d.u = lo
	return int(hi)
}

// float returns what is left, in [0, 1); it is the last draw.
func (d *dice) float() float64 { return float64(d.u>>11) / (1 << 53) }

// Set is one immutable snapshot of the endpoints a picker chooses among
// (a pool's primaries, or its backups), with the clock and random source
// its pickers use.
type Set struct {
	endpoints []*Endpoint    // immutable
	states    []slot         // immutable; states[i] is endpoints[i]'s, one hop closer for hot loops
	byName    map[string]int // immutable
	clock     health.Clock
	rand      Rand
	id        uint64 // unique to the set, never 0: what a cached index is valid in
}

// setIDs numbers sets.
var setIDs atomic.Uint64

// NewSet builds a set. Pools build their own; this is for pickers used
// directly and for tests.
func NewSet(endpoints []*Endpoint, clock health.Clock, r Rand) *Set {
	s := &Set{endpoints: endpoints, states: make([]slot, len(endpoints)), byName: make(map[string]int, len(endpoints)), clock: clock, rand: r, id: setIDs.Add(1)}
	for i, ep := range endpoints {
		s.byName[ep.Name] = i
		ep.pos = i
		s.states[i] = slot{State: ep.State, max: ep.MaxInflight, weight: int64(max(ep.Weight, 1))}
	}
	return s
}

// Endpoints returns the endpoints in config order. Do not modify the slice.
func (s *Set) Endpoints() []*Endpoint { return s.endpoints }

// Len returns the number of endpoints.
func (s *Set) Len() int { return len(s.endpoints) }

// Get returns the named endpoint, or nil.
func (s *Set) Get(name string) *Endpoint {
	if i, ok := s.byName[name]; ok {
		return s.endpoints[i]
	}
	return nil
}

// indexOf returns ep's index in the set, -1 when it is not in it: the
// index the endpoint kept when the set was built, checked, else its
// name looked up (an endpoint in two sets keeps the last one's).
func (s *Set) indexOf(ep *Endpoint) int {
	if i := ep.pos; i < len(s.endpoints) && s.endpoints[i] == ep {
		return i
	}
	if i, ok := s.byName[ep.Name]; ok && s.endpoints[i] == ep {
		return i
	}
	return -1
}

// Clock returns the set's clock.
func (s *Set) Clock() health.Clock { return s.clock }

// now is the time of a pick of a request dated at (0: undated) by the
// set's clock, in unix ns.
func (s *Set) now(at int64) int64 { return nowOr(at, s.clock) }

// Rand returns the set's random source.
func (s *Set) Rand() Rand { return s.rand }

// Available is the one availability predicate every policy skips by: the
// endpoint's health admits a request (health.State.Available: not
// draining, not down, breaker closed or ready for its probe) and it is
// under its in-flight cap.
func (s *Set) Available(ep *Endpoint) bool { return ep.State.Available(s.clock, ep.MaxInflight) }

// slot is what a hot loop reads of an endpoint: its state and its cap,
// side by side.
type slot struct {
	*health.State
	max    int64 // the endpoint's MaxInflight
	weight int64 // the endpoint's Weight, at least 1
}

// Hot loops call st := &s.states[i]; st.Available(s.clock, st.max)
// themselves: inlined there, a healthy endpoint without a cap costs one
// atomic load.

// randomAvailable picks uniformly among the available endpoints: a few
// draws over the whole set, accepting only available ones, then an exact
// draw when unavailable ones keep coming up.
func randomAvailable(s *Set) *Endpoint {
	n := len(s.endpoints)
	if n == 0 {
		return nil
	}
	for range 4 {
		if ep := s.endpoints[intn(s.rand, n)]; s.Available(ep) {
			return ep
		}
	}
	return draw(s, s.Available, nil)
}

// drawBuffer is how many endpoints draw remembers weights for, so that a
// weight is computed once a pick rather than once a pass.
const drawBuffer = 64

// draw picks among the endpoints ok accepts: in proportion to weight when
// weight is given and some accepted endpoint weighs more than 0, else
// uniformly. O(N): up to drawBuffer endpoints, one call of ok and weight
// each; beyond, two passes, where a weight that changes between them only
// shifts the drawn point and the last positive endpoint is taken if the
// walk runs past the end. Nil when ok accepts none.
func draw(s *Set, ok func(*Endpoint) bool, weight func(*Endpoint) float64) *Endpoint {
	var buf [drawBuffer]float64 // -1: not accepted
	buffered := len(s.endpoints) <= drawBuffer
	var total float64
	n := 0
	for i, ep := range s.endpoints {
		w := -1.0
		if ok(ep) {
			n++
			w = 0
			if weight != nil {
				w = max(weight(ep), 0)
				total += w
			}
		}
		if buffered {
			buf[i] = w
		}
	}
	if n == 0 {
		return nil
	}
	accepted := func(i int) (float64, bool) {
		if buffered {
			return buf[i], buf[i] >= 0
		}
		ep := s.endpoints[i]
		if !ok(ep) {
			return 0, false
		}
		if weight == nil {
			return 0, true
		}
		return weight(ep), true
	}
	if total > 0 {
		x := float(s.rand) * total
		var last *Endpoint
		for i, ep := range s.endpoints {
			w, yes := accepted(i)
			if !yes || w <= 0 {
				continue
			}
			last = ep
			if x -= w; x < 0 {
				return ep
			}
		}
		if last != nil {
			return last
		}
	}
	j := intn(s.rand, n)
	for i, ep := range s.endpoints {
		if _, yes := accepted(i); yes {
			if j == 0 {
				return ep
			}
			j--
		}
	}
	return nil
}

// availableNamed reports whether the named endpoint is in the set and
// available: what key-placing pickers walk past owners with.
func (s *Set) availableNamed(name string) bool {
	ep := s.Get(name)
	return ep != nil && s.Available(ep)
}

// nodes returns the set's endpoints as placement nodes.
func (s *Set) nodes() []placement.Node {
	nodes := make([]placement.Node, len(s.endpoints))
	for i, ep := range s.endpoints {
		nodes[i] = placement.Node{Name: ep.Name, Weight: ep.Weight}
	}
	return nodes
}
