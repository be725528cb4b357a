package balance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/health"
)

// EndpointConfig describes one endpoint to Build.
type EndpointConfig struct {
	Name   string
	Addr   string
	Weight int // 0 means 1
	// Cost enters the score as 1/(1 + cost_weight x cost) (article 001's
	// cost term): a dearer route must be that much better to win.
	Cost float64
	// MaxInflight caps the endpoint's concurrent requests; 0 is no cap.
	MaxInflight int64
	// Backup endpoints take requests only while no primary is available
	// (nginx's and HAProxy's backup servers).
	Backup bool
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

// Config is what a snapshot is built from.
type Config struct {
	// Policy picks among the available primaries and, separately, among
	// the available backups; what it keeps by endpoint name (smooth
	// weights, sticky pins, bounded loads) both share.
	Policy    Policy
	Endpoints []EndpointConfig
	// Health tunes the health model; the zero value means the defaults.
	Health health.Config
	// Classifier decides which outcomes are failures. Nil means
	// health.DefaultStatuses.
	Classifier *health.Classifier
	// PanicThreshold: while fewer than this share of the primaries are
	// available, a pick spreads over every primary that may take a
	// request, whatever its health (Envoy's panic mode), rather than
	// crushing the few that look well. 0 turns it off.
	PanicThreshold float64
	// SlowStart: an endpoint that came back (from down, or from an open
	// breaker) less than SlowStart ago is accepted when picked with
	// probability elapsed/SlowStart, at least 10%, so its share ramps up
	// instead of jumping to full at once. 0 turns it off.
	SlowStart time.Duration
	// StartDown: endpoints new to the pool start down, until an active
	// health check brings them up.
	StartDown bool
}

// Pool is a named set of endpoints and the policy that picks among them.
//
// What a pick reads is one immutable Snapshot. Build makes a snapshot
// beside the running one without touching it; Publish swaps it in; a
// snapshot never published is given back with Discard, and nothing
// running has changed. Configure is Build then Publish.
type Pool struct {
	name  string       // immutable
	store health.Store // immutable
	clock health.Clock // immutable
	rand  Rand         // immutable

	mu  sync.Mutex // serialises Publish
	cur atomic.Pointer[Snapshot]

	// Rare events, counted pool-wide; picks are counted per endpoint
	// (health.State), which keeps the hot path off one shared counter.
	fallbacks, unavailable, rejected, panics, backups atomic.Int64
}

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
	empty := &Snapshot{pool: p, policy: "none", classifier: defaultClassifier, tuning: &defaultTuning, byName: map[string]*Endpoint{}}
	empty.primary.set = NewSet(nil, p.clock, p.rand)
	empty.backup.set = empty.primary.set
	empty.initAsk()
	empty.phase.Store(published)
	p.cur.Store(empty)
	return p
}

var (
	defaultClassifier = health.MustClassifier(health.DefaultStatuses)
	defaultTuning     = health.Config{}.Normalize()
)

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Clock returns the pool's clock.
func (p *Pool) Clock() health.Clock { return p.clock }

// Store returns the store that keeps the pool's endpoint health.
func (p *Pool) Store() health.Store { return p.store }

// Snapshot returns the published snapshot.
func (p *Pool) Snapshot() *Snapshot { return p.cur.Load() }

// Policy returns the published snapshot's policy name.
func (p *Pool) Policy() string { return p.cur.Load().policy }

// Pick picks from the published snapshot: see Snapshot.Pick.
func (p *Pool) Pick(r Request) (Pick, error) { return p.cur.Load().Pick(r) }

// Configure builds a snapshot from c and publishes it. A bad config
// changes nothing.
func (p *Pool) Configure(c Config) error {
	s, err := p.Build(c)
	if err != nil {
		return err
	}
	return p.Publish(s)
}

// Build validates c and builds a snapshot from it, beside the running
// one: nothing a pick reads changes until Publish. An endpoint in both
// keeps its health (estimates, in-flight, breaker); one new to the pool
// starts afresh. Every snapshot built must be published or discarded.
func (p *Pool) Build(c Config) (*Snapshot, error) {
	if c.Policy == nil {
		return nil, fmt.Errorf("policy: required")
	}
	hc := c.Health.Normalize()
	if err := hc.Validate(); err != nil {
		return nil, fmt.Errorf("health.%w", err)
	}
	if !(c.PanicThreshold >= 0 && c.PanicThreshold <= 1) {
		return nil, fmt.Errorf("panic_threshold: must be between 0 and 1 (got %v)", c.PanicThreshold)
	}
	if c.SlowStart < 0 {
		return nil, fmt.Errorf("slow_start: must be zero or positive (got %v)", c.SlowStart)
	}
	seen := make(map[string]bool, len(c.Endpoints))
	primaries := 0
	for i, ec := range c.Endpoints {
		switch {
		case ec.Name == "":
			return nil, fmt.Errorf("endpoints[%d].name: required", i)
		case seen[ec.Name]:
			return nil, fmt.Errorf("endpoints[%d].name: %q appears twice", i, ec.Name)
		case ec.Weight < 0:
			return nil, fmt.Errorf("endpoints.%s.weight: must be at least 1 (got %d)", ec.Name, ec.Weight)
		case !(ec.Cost >= 0) || math.IsInf(ec.Cost, 0):
			return nil, fmt.Errorf("endpoints.%s.cost: must be zero or positive (got %v)", ec.Name, ec.Cost)
		case ec.MaxInflight < 0:
			return nil, fmt.Errorf("endpoints.%s.max_inflight: must be zero or positive (got %d)", ec.Name, ec.MaxInflight)
		}
		seen[ec.Name] = true
		if !ec.Backup {
			primaries++
		}
	}
	if primaries == 0 && len(c.Endpoints) > 0 {
		return nil, fmt.Errorf("endpoints: every endpoint is a backup: at least one must not be")
	}
	classifier := c.Classifier
	if classifier == nil {
		classifier = defaultClassifier
	}

	s := &Snapshot{
		pool: p, policy: c.Policy.Name(), classifier: classifier, tuning: &hc,
		panicThreshold: c.PanicThreshold, slowStart: c.SlowStart,
		all: make([]*Endpoint, len(c.Endpoints)), byName: make(map[string]*Endpoint, len(c.Endpoints)),
	}
	var prim, back []*Endpoint
	// An endpoint new to a pool that already serves (a reload, a DNS
	// change) warms up like one that came back; the first endpoints do
	// not, as there is no one to share their load with.
	warmNew := c.SlowStart > 0 && len(p.cur.Load().all) > 0
	for i, ec := range c.Endpoints {
		st, created := p.store.Acquire(ec.Name)
		switch {
		case created && c.StartDown:
			st.SetDown(true, p.clock.Now()) // new: nobody else holds it yet
		case created && warmNew:
			st.Arrived(p.clock.Now())
		}
		ep := &Endpoint{
			Name: ec.Name, Addr: ec.Addr, Weight: max(ec.Weight, 1), Cost: ec.Cost, MaxInflight: ec.MaxInflight,
			Backup: ec.Backup, State: st, tuning: &hc,
		}
		if d := hc.CostWeight * ec.Cost; d > 0 {
			ep.factor = 1 / (1 + d)
		}
		s.all[i], s.byName[ec.Name] = ep, ep
		if ec.Backup {
			back = append(back, ep)
		} else {
			prim = append(prim, ep)
		}
	}
	s.primary = newTier(NewSet(prim, p.clock, p.rand), c.Policy)
	s.backup = newTier(NewSet(back, p.clock, p.rand), c.Policy)
	s.initAsk()
	return s, nil
}

// ErrNotBuilt means a snapshot given to Publish or Discard was not built
// by that pool, or was already published or discarded.
var ErrNotBuilt = errors.New("balance: snapshot not built by this pool, or already published or discarded")

// Publish makes s the snapshot picks read. The one it replaces is
// retired: endpoints only it held are forgotten (their requests in flight
// still report to the states they hold).
func (p *Pool) Publish(s *Snapshot) error {
	if s.pool != p || !s.phase.CompareAndSwap(built, published) {
		return ErrNotBuilt
	}
	p.mu.Lock()
	old := p.cur.Swap(s)
	p.mu.Unlock()
	old.release()
	return nil
}

// Discard gives back a snapshot that will not be published: states only
// it created are forgotten, and nothing running has changed.
func (p *Pool) Discard(s *Snapshot) error {
	if s.pool != p || !s.phase.CompareAndSwap(built, discarded) {
		return ErrNotBuilt
	}
	s.release()
	return nil
}

// Stats counts what the pool did.
type Stats struct {
	Fallbacks   int64 `json:"fallbacks"`   // picks of the least bad, nothing being available
	Panics      int64 `json:"panics"`      // picks in panic mode
	Backups     int64 `json:"backups"`     // picks of a backup endpoint
	Unavailable int64 `json:"unavailable"` // picks that found no endpoint at all
	Rejected    int64 `json:"rejected"`    // picks a policy refused by rule
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	return Stats{
		Fallbacks: p.fallbacks.Load(), Panics: p.panics.Load(), Backups: p.backups.Load(),
		Unavailable: p.unavailable.Load(), Rejected: p.rejected.Load(),
	}
}

// Snapshot phases.
const (
	built int32 = iota
	published
	discarded
)

// Snapshot is one immutable view of a pool: its primary and backup
// endpoints, a picker over each, and the rules a pick follows.
type Snapshot struct {
	pool            *Pool
	primary, backup tier
	ask             [4]asking            // primary, primary strict, backup, backup strict
	all             []*Endpoint          // config order
	byName          map[string]*Endpoint // immutable
	policy          string
	classifier      *health.Classifier
	tuning          *health.Config // normalised
	panicThreshold  float64
	slowStart       time.Duration
	phase           atomic.Int32
}

type tier struct {
	set      *Set
	picker   Picker   // nil when the set is empty
	observer Observer // picker as an Observer, or nil
}

func newTier(s *Set, policy Policy) tier {
	t := tier{set: s}
	if s.Len() > 0 {
		t.picker = policy.Build(s)
		t.observer, _ = t.picker.(Observer)
	}
	return t
}

// release gives back the states this snapshot acquired.
func (s *Snapshot) release() {
	for _, t := range [2]*tier{&s.primary, &s.backup} {
		if r, ok := t.picker.(retirer); ok {
			r.retire()
		}
	}
	for _, ep := range s.all {
		s.pool.store.Release(ep.Name)
	}
}

// retirer is a picker that keeps something up to date while its snapshot
// serves, and stops when it is replaced or discarded.
type retirer interface{ retire() }

// Pool returns the pool the snapshot was built by.
func (s *Snapshot) Pool() *Pool { return s.pool }

// Endpoints returns every endpoint, primaries and backups, in config
// order. Do not modify the slice.
func (s *Snapshot) Endpoints() []*Endpoint { return s.all }

// Get returns the named endpoint, or nil.
func (s *Snapshot) Get(name string) *Endpoint { return s.byName[name] }

// Policy returns the policy's name.
func (s *Snapshot) Policy() string { return s.policy }

// Primaries returns the primary endpoints' set.
func (s *Snapshot) Primaries() *Set { return s.primary.set }

// Backups returns the backup endpoints' set (empty without backups).
func (s *Snapshot) Backups() *Set { return s.backup.set }

// Request is what a pick may look at.
type Request struct {
	// Key is the request's key for key-based and sticky policies (a header,
	// cookie, client address...). Empty when the request has none.
	Key string
	// Pin names an endpoint to take first when it is available: a session
	// cookie's. The policy is not asked.
	Pin string
	// Tried names endpoints this request has already tried: they are
	// avoided while any other can take it.
	Tried []string
	// At is the time now by the pool's clock in unix nanoseconds
	// (time.Time.UnixNano), when the caller has just read it (a proxy, as
	// the request starts); zero means a policy that weighs time
	// (peak_ewma, scored, sticky's table, slow start) asks the clock. A
	// clock read costs as much as a third of a pick on some virtual
	// machines.
	//
	// A number rather than a time.Time (three words) keeps the Request
	// within the registers Go passes arguments in: at ten words it was
	// copied through memory into every call down to the policy's picker,
	// 3-7 ns of a pick.
	At int64
}

// nowOr is at, a request's time in unix ns, or c's time when the request
// brings none. It takes the time alone: a whole Request passed down would
// be copied again.
func nowOr(at int64, c health.Clock) int64 {
	if at != 0 {
		return at
	}
	return c.Now().UnixNano()
}

// Pick chooses an endpoint for r. It is the one entry point: the fallback
// order lives here, so that every caller gets it.
//
//  1. The pinned endpoint (r.Pin), when it is available.
//  2. Panic mode: when fewer than the panic threshold of primaries are
//     available, any primary that may take a request, uniformly.
//  3. The policy over the available primaries, then over the available
//     backups. Endpoints already tried and endpoints in their slow start
//     are refused and the policy asked again, without the key; an
//     endpoint whose breaker will not admit the request is refused too.
//  4. The same without the refusals, when they left nothing.
//  5. The least bad: among endpoints not draining and not full, one
//     drawn in proportion to its score as if no breaker were open
//     (article 001: a pool that is all sick still tries).
//
// It never blocks. It returns ErrNoEndpoint only when no endpoint may take
// a request at all, and ErrRejected when the policy refused the request by
// rule. The caller must call Done (or Report and Release) on the result
// exactly once.
func (s *Snapshot) Pick(r Request) (Pick, error) {
	if r.Pin == "" && len(r.Tried) == 0 && s.panicThreshold == 0 && s.slowStart == 0 {
		// The common case: nothing pinned, nothing to refuse.
		if pk, err := s.ask[0].pick(r); err != ErrNoEndpoint {
			return pk, err
		}
		return s.pickRest(r, false)
	}
	p := s.pool
	if r.Pin != "" {
		if ep := s.byName[r.Pin]; ep != nil && !tried(r, ep) && s.tierOf(ep).set.Available(ep) {
			if t, ok := ep.State.Admit(p.clock, s.tuning); ok {
				return s.made(ep, t, 0), nil
			}
		}
	}
	if s.panicThreshold > 0 && s.primary.set.Len() > 0 && healthyShare(s.primary.set) < s.panicThreshold {
		if ep := s.leastBad(&s.primary, r, false); ep != nil {
			p.panics.Add(1)
			return s.made(ep, ep.State.AdmitFallback(s.tuning), 0), nil
		}
	}
	refuse := len(r.Tried) > 0 || s.slowStart > 0
	if pk, err := s.asker(false, refuse).pick(r); err != ErrNoEndpoint {
		return pk, err
	}
	return s.pickRest(r, refuse)
}

// pickRest goes on from the primaries: the backups, then (after refusals)
// both again without refusing, then the least bad.
func (s *Snapshot) pickRest(r Request, refused bool) (Pick, error) {
	pk, err := s.asker(true, refused).pick(r)
	if err == nil {
		s.pool.backups.Add(1)
	}
	if err != ErrNoEndpoint {
		return pk, err
	}
	if refused {
		if pk, err := s.ask[0].pick(r); err != ErrNoEndpoint {
			return pk, err
		}
		return s.pickRest(r, false)
	}
	for _, t := range [2]*tier{&s.primary, &s.backup} {
		if ep := s.leastBad(t, r, true); ep != nil {
			s.pool.fallbacks.Add(1)
			return s.made(ep, ep.State.AdmitFallback(s.tuning), leastBad), nil
		}
	}
	s.pool.unavailable.Add(1)
	return Pick{}, ErrNoEndpoint
}

func (s *Snapshot) tierOf(ep *Endpoint) *tier {
	if ep.Backup {
		return &s.backup
	}
	return &s.primary
}

func tried(r Request, ep *Endpoint) bool {
	return len(r.Tried) > 0 && slices.Contains(r.Tried, ep.Name)
}

// asking is a tier asked for a pick, and how: strict refuses endpoints
// already tried and endpoints in their slow start. A Snapshot keeps the
// four (its primaries and its backups, strict or not), so that pick takes
// its receiver and the Request alone, nine words, which Go passes in
// registers, and returns the Pick and its error in registers too. With
// the tier, the strictness and a place for the pick as arguments, the
// Request went through memory: spilled, and copied in 16-byte loads over
// the 8-byte stores that had just spilled it, which the processor cannot
// forward.
type asking struct {
	s      *Snapshot
	t      *tier
	strict bool
}

func (s *Snapshot) initAsk() {
	s.ask = [4]asking{{s, &s.primary, false}, {s, &s.primary, true}, {s, &s.backup, false}, {s, &s.backup, true}}
}

// asker is the asking of the backups or the primaries, strict or not.
func (s *Snapshot) asker(backup, strict bool) *asking {
	i := 0
	if backup {
		i = 2
	}
	if strict {
		i++
	}
	return &s.ask[i]
}

// pick asks the tier's policy. With strict set, endpoints already tried
// and endpoints in their slow start are refused: the pick is given back
// uncounted and the policy asked again, without the key, so it may spread
// elsewhere. After three refusals an endpoint not yet tried is drawn
// uniformly from those available (a policy that leans hard on the one
// that just failed would otherwise send the retry straight back to it);
// only when there is none does it give up with ErrNoEndpoint.
func (a *asking) pick(r Request) (Pick, error) {
	s, t, strict := a.s, a.t, a.strict
	if t.picker == nil {
		return Pick{}, ErrNoEndpoint
	}
	for range 3 {
		ep, err := t.picker.Pick(r)
		if err == ErrRejected {
			s.pool.rejected.Add(1)
			return Pick{}, err
		}
		if ep == nil {
			break
		}
		if strict && (tried(r, ep) || !s.warm(ep, r)) {
			if t.observer != nil {
				t.observer.Done(ep) // give back what the picker took
			}
			r.Key = ""
			continue
		}
		if tk, ok := ep.State.Admit(s.pool.clock, s.tuning); ok {
			return s.made(ep, tk, byPolicy), nil
		}
		if t.observer != nil {
			t.observer.Done(ep)
		}
	}
	if strict && len(r.Tried) > 0 {
		untried := func(ep *Endpoint) bool { return !tried(r, ep) && t.set.Available(ep) }
		if ep := draw(t.set, untried, nil); ep != nil && s.warm(ep, r) {
			if tk, ok := ep.State.Admit(s.pool.clock, s.tuning); ok {
				return s.made(ep, tk, 0), nil
			}
		}
	}
	return Pick{}, ErrNoEndpoint
}

// warm applies slow start: an endpoint that came back less than SlowStart
// ago takes a pick with probability elapsed/SlowStart, at least 10%.
func (s *Snapshot) warm(ep *Endpoint, r Request) bool {
	if s.slowStart <= 0 {
		return true
	}
	since := ep.State.UpSince()
	if since.IsZero() {
		return true
	}
	f := float64(nowOr(r.At, s.pool.clock)-since.UnixNano()) / float64(s.slowStart)
	if f >= 1 {
		return true
	}
	return float(s.pool.rand) < max(f, 0.1)
}

// leastBad draws among t's endpoints that may take a request at all (not
// draining, not full), avoiding those already tried when it can: in
// proportion to their scores ignoring breakers when byScore is set (and
// uniformly when every score is 0), else uniformly.
func (s *Snapshot) leastBad(t *tier, r Request, byScore bool) *Endpoint {
	var weight func(*Endpoint) float64
	if byScore {
		weight = (*Endpoint).scoreIgnoringBreaker
	}
	if len(r.Tried) > 0 {
		if ep := draw(t.set, func(ep *Endpoint) bool { return mayTake(ep) && !tried(r, ep) }, weight); ep != nil {
			return ep
		}
	}
	return draw(t.set, mayTake, weight)
}

// healthyShare is the share of endpoints available now (1 when empty).
func healthyShare(s *Set) float64 {
	if len(s.states) == 0 {
		return 1
	}
	n := 0
	for i := range s.states {
		if st := &s.states[i]; st.Available(s.clock, st.max) {
			n++
		}
	}
	return float64(n) / float64(len(s.states))
}

// mayTake reports whether an endpoint may take a request at all, whatever
// its health: not draining, not at its in-flight cap.
func mayTake(ep *Endpoint) bool { return !ep.State.Draining() && !ep.Full() }

func (s *Snapshot) made(ep *Endpoint, t health.Ticket, how pickHow) Pick {
	return Pick{Endpoint: ep, snap: s, stub: t.Stub(), how: how}
}

// Pick is one pick: the endpoint, and the hooks that report its outcome
// and end it.
//
// A Pick is four fields in four words: the most Go's compiler keeps in
// registers as a value (SSA) rather than in memory. One word more (the
// whole health ticket, whose State and tuning the endpoint and the
// snapshot already hold) and every Pick made, returned or stored went
// through the stack, copied in 16-byte loads over the narrower stores
// that had just written it, which the processor cannot forward: a fifth
// of a pick and its outcome. What can be found from the endpoint or the
// snapshot (the State, the tuning, the picker to tell) is found there
// rather than kept here.
type Pick struct {
	Endpoint *Endpoint

	snap *Snapshot   // its classifier, clock, tuning and pickers
	stub health.Stub // the ticket's, with Endpoint.State and snap.tuning
	how  pickHow
}

// pickHow says how a pick was made.
type pickHow uint8

const (
	// byPolicy: the tier's picker chose it; one that keeps accounts
	// (an Observer) is told when it ends.
	byPolicy pickHow = 1 << iota
	// leastBad: nothing was available and this is the least bad.
	leastBad
)

// Fallback reports whether nothing was available and this is the least
// bad endpoint.
func (pk *Pick) Fallback() bool { return pk.how&leastBad != 0 }

// Probe reports whether this request is the breaker's half-open probe.
func (pk *Pick) Probe() bool { return pk.stub.Probe() }

// ticket is the health ticket the pick was admitted with.
func (pk *Pick) ticket() health.Ticket { return pk.Endpoint.State.Resume(pk.snap.tuning, pk.stub) }

// Report feeds the request's outcome to the endpoint's health, once, and
// returns the verdict the pool's classifier gave it. The request stays in
// flight until Release: a connection that was established (an outcome)
// and stays open (still in flight) reports first and releases when it
// closes.
func (pk *Pick) Report(o health.Outcome) health.Verdict {
	if pk.Endpoint == nil {
		return health.Ignore
	}
	v := pk.snap.classifier.Judge(o.Status, o.Err)
	at := o.At
	if at.IsZero() {
		at = pk.snap.pool.clock.Now()
	}
	pk.ticket().Observe(v, o.Latency, at)
	return v
}

// Release ends the request, once: the endpoint's in-flight count goes
// down, and a picker that keeps accounts (bounded loads) is told.
func (pk *Pick) Release() {
	if pk.Endpoint == nil {
		return
	}
	pk.ticket().Release()
	if pk.how&byPolicy != 0 {
		if obs := pk.snap.tierOf(pk.Endpoint).observer; obs != nil {
			obs.Done(pk.Endpoint)
		}
	}
}

// Done is Report then Release: the request's outcome, when the request
// ends with it.
func (pk *Pick) Done(o health.Outcome) health.Verdict {
	v := pk.Report(o)
	pk.Release()
	return v
}
