package balance

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rotor-lb/rotor/health"
)

// EndpointConfig describes one endpoint to Configure.
type EndpointConfig struct {
	Name   string
	Addr   string
	Weight int // 0 means 1
	// Cost enters the score as 1/(1 + cost_weight x cost) (article 001's
	// cost term): a dearer route must be that much better to win.
	Cost float64
	// MaxInflight caps the endpoint's concurrent requests; 0 is no cap.
	MaxInflight int64
}

// Options are a pool's fixed parts.
type Options struct {
	// Store keeps endpoint health by name. Nil means a new MemoryStore.
	Store health.Store
	// Clock tells the time. Nil means the system clock.
	Clock health.Clock
	// Rand is the random source. Nil means FastRand.
	Rand Rand
}

// Config is what Configure may change on a running pool.
type Config struct {
	Policy    Policy
	Endpoints []EndpointConfig
	// Health tunes the health model; the zero value means the defaults.
	Health health.Config
	// Classifier decides which outcomes are failures. Nil means
	// health.DefaultStatuses.
	Classifier *health.Classifier
}

// Pool is a named set of endpoints and the policy that picks among them.
type Pool struct {
	name  string       // immutable
	store health.Store // immutable
	clock health.Clock // immutable
	rand  Rand         // immutable

	mu  sync.Mutex // serialises Configure
	cur atomic.Pointer[poolSnap]

	// Rare events, counted pool-wide; picks are counted per endpoint
	// (health.State), which keeps the hot path off one shared counter.
	fallbacks, unavailable, rejected atomic.Int64
}

// poolSnap is what Pick loads: one set, its picker, its classifier.
type poolSnap struct {
	set        *Set
	picker     Picker
	observer   Observer // picker as an Observer, or nil
	policy     string
	classifier *health.Classifier
}

var defaultClassifier = health.MustClassifier(health.DefaultStatuses)

// NewPool returns a pool with no endpoints; Configure gives it some.
func NewPool(name string, opts Options) *Pool {
	if opts.Store == nil {
		opts.Store = health.NewMemoryStore()
	}
	if opts.Clock == nil {
		opts.Clock = health.SystemClock{}
	}
	if opts.Rand == nil {
		opts.Rand = FastRand{}
	}
	p := &Pool{name: name, store: opts.Store, clock: opts.Clock, rand: opts.Rand}
	set := NewSet(nil, p.clock, p.rand)
	p.cur.Store(&poolSnap{set: set, picker: (&RoundRobin{}).Build(set), policy: "round_robin", classifier: defaultClassifier})
	return p
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Configure validates c and, if it is good, publishes a new snapshot. An
// endpoint that stays keeps its health (estimates, in-flight, breaker); one
// that leaves is forgotten once it is gone, and its requests in flight still
// report to the state they hold. A bad config changes nothing.
func (p *Pool) Configure(c Config) error {
	if c.Policy == nil {
		return fmt.Errorf("policy: required")
	}
	hc := c.Health.Normalize()
	if err := hc.Validate(); err != nil {
		return fmt.Errorf("health.%w", err)
	}
	seen := make(map[string]bool, len(c.Endpoints))
	for i, ec := range c.Endpoints {
		switch {
		case ec.Name == "":
			return fmt.Errorf("endpoints[%d].name: required", i)
		case seen[ec.Name]:
			return fmt.Errorf("endpoints[%d].name: %q appears twice", i, ec.Name)
		case ec.Weight < 0:
			return fmt.Errorf("endpoints.%s.weight: must be at least 1 (got %d)", ec.Name, ec.Weight)
		case ec.Cost < 0:
			return fmt.Errorf("endpoints.%s.cost: must be zero or positive (got %v)", ec.Name, ec.Cost)
		case ec.MaxInflight < 0:
			return fmt.Errorf("endpoints.%s.max_inflight: must be zero or positive (got %d)", ec.Name, ec.MaxInflight)
		}
		seen[ec.Name] = true
	}
	classifier := c.Classifier
	if classifier == nil {
		classifier = defaultClassifier
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	eps := make([]*Endpoint, len(c.Endpoints))
	for i, ec := range c.Endpoints {
		st := p.store.State(ec.Name, hc)
		st.SetCost(ec.Cost)
		st.SetMaxInflight(ec.MaxInflight)
		eps[i] = &Endpoint{Name: ec.Name, Addr: ec.Addr, Weight: max(ec.Weight, 1), Cost: ec.Cost, State: st}
	}
	set := NewSet(eps, p.clock, p.rand)
	picker := c.Policy.Build(set)
	obs, _ := picker.(Observer)
	old := p.cur.Swap(&poolSnap{set: set, picker: picker, observer: obs, policy: c.Policy.Name(), classifier: classifier})
	for _, ep := range old.set.endpoints {
		if !seen[ep.Name] {
			p.store.Forget(ep.Name)
		}
	}
	return nil
}

// Set returns the current snapshot's endpoints.
func (p *Pool) Set() *Set { return p.cur.Load().set }

// Policy returns the current policy's name.
func (p *Pool) Policy() string { return p.cur.Load().policy }

// Clock returns the pool's clock.
func (p *Pool) Clock() health.Clock { return p.clock }

// Pick chooses an endpoint for r. The caller must call Done on the result
// exactly once, when the request ends. It never blocks.
//
// The policy picks among available endpoints; the breaker then admits the
// pick (an open breaker past its cooldown admits one probe, and two
// concurrent picks may race for it, so a refused pick is retried). When
// the policy finds nothing available, the pool falls back to the least bad
// endpoint: among those not draining and not full, one drawn in proportion
// to its score as if no breaker were open (uniformly if every score is 0).
// It returns ErrNoEndpoint only when no endpoint may take a request at all,
// and ErrRejected when the policy refused the request by rule.
func (p *Pool) Pick(r Request) (Pick, error) {
	pk, err := p.PickAvailable(r)
	if err != ErrNoEndpoint {
		return pk, err
	}
	snap := p.cur.Load()
	return p.fallback(snap, draw(snap.set, mayTake, scoreIgnoringBreaker))
}

// PickAvailable is Pick without the fallback: when the policy finds nothing
// available it returns ErrNoEndpoint, so that a caller with somewhere else
// to go (backup endpoints) can go there first.
func (p *Pool) PickAvailable(r Request) (Pick, error) { return p.PickAvailableIf(r, nil) }

// PickAvailableIf is PickAvailable that also refuses the endpoints accept
// rejects (nil accepts all): endpoints a request already tried, or one
// still in its slow start. A refused pick is given back uncounted and the
// policy asked again, without the key, so it may spread elsewhere; after
// three refusals it returns ErrNoEndpoint.
func (p *Pool) PickAvailableIf(r Request, accept func(*Endpoint) bool) (Pick, error) {
	snap := p.cur.Load()
	for range 3 {
		ep, err := snap.picker.Pick(r)
		if err == ErrRejected {
			p.rejected.Add(1)
			return Pick{}, err
		}
		if ep == nil {
			break
		}
		if accept != nil && !accept(ep) {
			if snap.observer != nil {
				snap.observer.Done(ep, health.Ignore)
			}
			r.Key = ""
			continue
		}
		if t, ok := ep.State.Admit(p.clock); ok {
			ep.State.Begin()
			return Pick{Endpoint: ep, ticket: t, snap: snap, clock: p.clock, picked: true}, nil
		}
		if snap.observer != nil {
			snap.observer.Done(ep, health.Ignore) // give back what the picker took
		}
	}
	return Pick{}, ErrNoEndpoint
}

// PickNamed picks the named endpoint if it is in the pool and available
// (a session cookie pins a client to it); ok is false otherwise, and
// nothing was counted.
func (p *Pool) PickNamed(name string) (Pick, bool) {
	snap := p.cur.Load()
	ep := snap.set.Get(name)
	if ep == nil || !snap.set.Available(ep) {
		return Pick{}, false
	}
	t, ok := ep.State.Admit(p.clock)
	if !ok {
		return Pick{}, false
	}
	ep.State.Begin()
	return Pick{Endpoint: ep, ticket: t, snap: snap, clock: p.clock}, true
}

// PickAny spreads over every endpoint that is not draining or full,
// whatever its health: Envoy's panic mode, for when so few endpoints look
// healthy that sending them everything would crush them. The pick counts
// as a fallback.
func (p *Pool) PickAny() (Pick, error) {
	snap := p.cur.Load()
	return p.fallback(snap, draw(snap.set, mayTake, nil))
}

// HealthyShare is the share of endpoints available now (1 when empty).
func (p *Pool) HealthyShare() float64 {
	s := p.cur.Load().set
	if len(s.states) == 0 {
		return 1
	}
	n := 0
	for _, st := range s.states {
		if st.Available(s.clock) {
			n++
		}
	}
	return float64(n) / float64(len(s.states))
}

// mayTake reports whether an endpoint may take a request at all, whatever
// its health: not draining, not at its in-flight cap.
func mayTake(ep *Endpoint) bool { return !ep.State.Draining() && !ep.State.Full() }

func scoreIgnoringBreaker(ep *Endpoint) float64 { return ep.State.ScoreIgnoringBreaker() }

// fallback counts and returns a pick of ep made past its breaker.
func (p *Pool) fallback(snap *poolSnap, ep *Endpoint) (Pick, error) {
	if ep == nil {
		p.unavailable.Add(1)
		return Pick{}, ErrNoEndpoint
	}
	ep.State.Begin()
	p.fallbacks.Add(1)
	return Pick{Endpoint: ep, Fallback: true, ticket: ep.State.AdmitFallback(), snap: snap, clock: p.clock}, nil
}

// Pick is one pick: the endpoint, and the hook that reports its outcome.
type Pick struct {
	Endpoint *Endpoint
	// Fallback says nothing was available and this is the least bad.
	Fallback bool

	ticket health.Ticket
	snap   *poolSnap
	clock  health.Clock
	picked bool // the picker chose it (not the fallback): report to its Observer
}

// Probe reports whether this request is the breaker's half-open probe.
func (pk Pick) Probe() bool { return pk.ticket.Probe() }

// Done reports the request's outcome, exactly once, and returns the verdict
// the pool's classifier gave it.
func (pk Pick) Done(o health.Outcome) health.Verdict {
	if pk.Endpoint == nil {
		return health.Ignore
	}
	v := pk.snap.classifier.Classify(o)
	st := pk.Endpoint.State
	st.End()
	at := o.At
	if at.IsZero() {
		at = pk.clock.Now()
	}
	st.Observe(pk.ticket, v, o.Latency, at)
	if pk.picked && pk.snap.observer != nil {
		pk.snap.observer.Done(pk.Endpoint, v)
	}
	return v
}

// Stats counts what the pool did.
type Stats struct {
	Fallbacks   int64 `json:"fallbacks"`   // picks of the least bad, nothing being available
	Unavailable int64 `json:"unavailable"` // picks that found no endpoint at all
	Rejected    int64 `json:"rejected"`    // picks a policy refused by rule
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	return Stats{Fallbacks: p.fallbacks.Load(), Unavailable: p.unavailable.Load(), Rejected: p.rejected.Load()}
}
