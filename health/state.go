package health

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of an endpoint's circuit breaker.
type BreakerState int32

const (
	// Closed: requests flow; consecutive failures are counted.
	Closed BreakerState = iota
	// Open: no requests until the cooldown has passed.
	Open
	// HalfOpen: the cooldown has passed; exactly one probe at a time may go
	// through, and its outcome decides: success closes, failure reopens.
	HalfOpen
)

func (b BreakerState) String() string {
	switch b {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "unknown"
}

// Bits of State.flags.
const (
	flagDraining uint32 = 1 << iota // SetDraining
	flagDown                        // SetDown
	flagBreaker                     // the breaker is not closed; written under mu
)

// Ticket is one request admitted on an endpoint: the breaker's permission,
// and the only way to report the request's outcome and end it. Admit hands
// it out and counts the request in flight; Observe feeds the outcome back,
// Release ends the request. The generation ties the outcome to the breaker
// state it was admitted under: an outcome from an older state still feeds
// the EWMAs but cannot move the breaker (sony/gobreaker's generation
// counter). The zero Ticket belongs to no endpoint; its methods do nothing.
type Ticket struct {
	s    *State
	cfg  *Config // the tuning the request was admitted under
	gen  uint32
	kind ticketKind
}

// ticketKind says how a ticket was admitted. It is one field rather than
// two flags so that a Ticket, and a pick holding one, stays within the
// registers Go returns results in: a result that does not fit goes through
// memory, copied field by field, and those copies were a fifth of a
// whole pick and outcome.
type ticketKind uint8

const (
	ordinary ticketKind = iota
	probe               // the one half-open probe
	fallback            // admitted past the breaker, nothing being available
)

// Probe reports whether the ticket is the half-open probe.
func (t Ticket) Probe() bool { return t.kind == probe }

// Stub is a Ticket without its State and its tuning, for a holder that
// keeps both anyway (a balance.Pick keeps the endpoint whose State it is
// and the snapshot whose tuning it is): at four words a Pick is small
// enough for Go to keep in registers, where with the whole ticket it
// went through memory, copied in 16-byte loads over the narrower stores
// that had just made it, which the processor cannot forward. Only a
// Ticket gives a Stub; Resume makes the ticket again.
type Stub struct {
	gen  uint32
	kind ticketKind
}

// Stub returns the ticket's stub.
func (t Ticket) Stub() Stub { return Stub{gen: t.gen, kind: t.kind} }

// Probe reports whether the stub's ticket is the half-open probe.
func (st Stub) Probe() bool { return st.kind == probe }

// Resume returns the ticket whose stub st is: s and cfg must be the state
// that admitted it and the tuning it was admitted under.
func (s *State) Resume(cfg *Config, st Stub) Ticket {
	return Ticket{s: s, cfg: cfg, gen: st.gen, kind: st.kind}
}

// Release ends the request: the endpoint's in-flight count goes down.
// Call it once per ticket, when the request (or the connection it opened)
// is over; the outcome may have been observed before.
func (t Ticket) Release() {
	if t.s != nil {
		t.s.released.Add(1)
		t.s.changed()
	}
}

// Observe feeds the request's verdict and latency back, at now: the
// EWMAs learn, and the breaker moves if the ticket's generation is still
// the current one. Call it at most once per ticket.
func (t Ticket) Observe(v Verdict, latency time.Duration, now time.Time) {
	if t.s != nil {
		t.s.observe(&t, v, latency, now)
	}
}

// State is one endpoint's health: running estimates learned from outcomes
// (success EWMA, latency EWMA, peak-EWMA latency), in-flight count, circuit
// breaker, and the operator's flags (draining, down). It is keyed by
// endpoint name in a Store and outlives config reloads. It holds no
// configuration: the tuning (decays, breaker threshold and cooldown) comes
// with each admitted request, from the pool snapshot that admitted it, so
// that building a new snapshot beside a running one changes nothing here.
//
// Every method is safe for concurrent use, and neither a pick nor an
// ordinary outcome takes a lock. Each estimate is one atomic word that an
// outcome updates with compare-and-swap, so concurrent outcomes are never
// lost; the failures in a row share a word with the breaker's generation,
// so a threshold of 3 is exactly 3 under any contention and a failure from
// an older generation never counts toward it. The breaker's transitions
// (open, half-open, close) and adopting a shared copy happen under a
// mutex: they are rare, and each changes several words.
type State struct {
	name string // immutable

	// Read on the pick path.
	//
	// flags gathers everything that can make the endpoint unavailable, so
	// that the common case, a healthy endpoint, is one atomic load.
	flags   atomic.Uint32 // flag* bits
	success atomic.Uint64 // float64 bits of the success EWMA; next to flags, as scored reads both
	latency atomic.Uint64 // float64 bits of the latency EWMA, seconds; unmeasured until the first
	// Requests admitted (Admit) and released (Ticket.Release), ever:
	// the difference is in flight, and one counter serves both the
	// in-flight count and the requests total.
	admitted, released atomic.Int64
	watch              atomic.Pointer[Watch] // told of in-flight changes; nil: nobody
	breaker            atomic.Int32          // BreakerState, written under mu
	openUntil          atomic.Int64          // unix ns the cooldown ends; written under mu
	probing            atomic.Bool           // a half-open probe is out; written under mu
	// run holds the breaker's generation (high 32 bits, changed under mu
	// on every transition) and the failures in a row counted in it (low
	// 32 bits, counted by outcomes with compare-and-swap).
	run       atomic.Uint64
	peakValue atomic.Uint64 // float64 bits, seconds
	peakStamp atomic.Int64  // unix ns of the last peak update, 0 before any
	upSince   atomic.Int64  // unix ns it last came back; SetDown and the breaker

	reporter atomic.Pointer[Reporter] // SetReporter; nil for a local state
	shared   atomic.Bool              // Adopt, Unshare

	// Counters for metrics.
	successes, failures, ignored atomic.Int64
	opens                        atomic.Int64 // times the breaker opened

	mu        sync.Mutex // breaker transitions, Adopt
	sharedGen uint64     // guarded by mu; the shared breaker's last transition adopted
}

// unmeasured is the latency word before the first measure: the bits of
// negative zero, which reads as 0 wherever the latency is used, and which
// no measure produces (a duration's seconds are never -0).
const unmeasured = 1 << 63

// NewState returns the state of a new endpoint: optimistic (success 1,
// latency 0, score 1), breaker closed.
func NewState(name string) *State {
	s := &State{name: name}
	s.success.Store(math.Float64bits(1))
	s.latency.Store(unmeasured)
	return s
}

// gen returns the breaker's generation.
func (s *State) gen() uint32 { return uint32(s.run.Load() >> 32) }

// nextGen starts a new breaker generation, with no failures in a row.
// Called with mu held, on every transition.
func (s *State) nextGen() { s.run.Store(uint64(s.gen()+1) << 32) }

// latencyEWMA returns the latency EWMA in seconds, 0 before any measure.
func (s *State) latencyEWMA() float64 { return math.Abs(math.Float64frombits(s.latency.Load())) }

// Name returns the endpoint name the state belongs to.
func (s *State) Name() string { return s.name }

func (s *State) setFlag(f uint32, on bool) {
	if on {
		s.flags.Or(f)
	} else {
		s.flags.And(^f)
	}
}

// SetDraining marks the endpoint draining: it takes no new requests, and
// those in flight finish.
func (s *State) SetDraining(v bool) { s.setFlag(flagDraining, v) }

// Draining reports whether the endpoint is draining.
func (s *State) Draining() bool { return s.flags.Load()&flagDraining != 0 }

// SetDown records, at now, the verdict of active health checks: a down
// endpoint is not picked. Coming back up starts the slow-start window.
func (s *State) SetDown(v bool, now time.Time) {
	was := s.Down()
	s.setFlag(flagDown, v)
	if was && !v {
		s.upSince.Store(now.UnixNano())
	}
}

// Arrived marks an endpoint new to a pool that already serves: it warms
// up (slow start) as one that came back would.
func (s *State) Arrived(now time.Time) { s.upSince.Store(now.UnixNano()) }

// UpSince returns when the endpoint last came back, from down or from an
// open breaker, or arrived in a serving pool; zero if none of these.
func (s *State) UpSince() time.Time {
	if ns := s.upSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Down reports whether active checks have marked the endpoint down.
func (s *State) Down() bool { return s.flags.Load()&flagDown != 0 }

// Inflight returns the requests in flight: admitted, not yet released.
// Read while requests come and go, it may count one just released, never
// miss one admitted.
func (s *State) Inflight() int64 {
	r := s.released.Load() // first: a release read late would undercount
	return s.admitted.Load() - r
}

// Watch is told, by calling Changed, after every change of a state's
// in-flight count, from the goroutine that made it: a picker that keeps an
// index of endpoints by load (least_conn) stays up to date without
// scanning. Changed must be quick and must not call back into the state's
// Admit or Release.
type Watch struct {
	// Seq orders watches: a state keeps the one with the highest, so a
	// picker built later takes over from the one it replaces.
	Seq     uint64
	Changed func()
}

// SetWatch makes w the state's watch unless one with a higher Seq is
// already in place, and reports whether w is now the watch.
func (s *State) SetWatch(w *Watch) bool {
	for {
		cur := s.watch.Load()
		if cur == w {
			return true
		}
		if cur != nil && cur.Seq > w.Seq {
			return false
		}
		if s.watch.CompareAndSwap(cur, w) {
			return true
		}
	}
}

// ClearWatch removes w, when it is the state's watch.
func (s *State) ClearWatch(w *Watch) { s.watch.CompareAndSwap(w, nil) }

func (s *State) changed() {
	if w := s.watch.Load(); w != nil {
		w.Changed()
	}
}

// Available reports whether the endpoint may take a request now: not
// draining, not down, fewer than max requests in flight (0: no cap; the
// cap is the pool's), and a breaker that would admit one (closed; or open
// past its cooldown, or half-open, with no probe out). It reads atomics
// only and asks clock the time only when the breaker is not closed; the
// common case, a healthy endpoint with no cap, is one atomic load.
func (s *State) Available(clock Clock, max int64) bool {
	if s.flags.Load() == 0 && max == 0 {
		return true
	}
	return s.availableSlow(clock, max)
}

func (s *State) availableSlow(clock Clock, max int64) bool {
	f := s.flags.Load()
	if f&(flagDraining|flagDown) != 0 || max > 0 && s.Inflight() >= max {
		return false
	}
	return f&flagBreaker == 0 || s.breakerAdmits(clock)
}

func (s *State) breakerAdmits(clock Clock) bool {
	switch BreakerState(s.breaker.Load()) {
	case Closed:
		return true
	case Open:
		return !s.probing.Load() && clock.Now().UnixNano() >= s.openUntil.Load()
	default:
		return !s.probing.Load()
	}
}

// Breaker returns the breaker state at now: an open breaker whose cooldown
// has passed reports HalfOpen, as it would admit a probe.
func (s *State) Breaker(now time.Time) BreakerState {
	b := BreakerState(s.breaker.Load())
	if b == Open && now.UnixNano() >= s.openUntil.Load() {
		return HalfOpen
	}
	return b
}

// Admit asks the breaker for one request, under the tuning cfg (nil means
// the defaults), and counts it in flight when admitted. Closed admits
// everything; open admits nothing until the cooldown has passed, then
// turns half-open and admits exactly one probe; half-open admits one probe
// at a time. The clock is read only when the breaker is not closed.
func (s *State) Admit(clock Clock, cfg *Config) (Ticket, bool) {
	if BreakerState(s.breaker.Load()) == Closed {
		return s.ticket(cfg, s.gen(), ordinary), true
	}
	now := clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch BreakerState(s.breaker.Load()) {
	case Closed:
		return s.ticket(cfg, s.gen(), ordinary), true
	case Open:
		if now.UnixNano() < s.openUntil.Load() {
			return Ticket{}, false
		}
		s.nextGen()
		s.breaker.Store(int32(HalfOpen)) // flagBreaker stays set
	}
	if s.probing.Load() {
		return Ticket{}, false
	}
	s.probing.Store(true)
	return s.ticket(cfg, s.gen(), probe), true
}

// AdmitFallback admits a request past the breaker, and counts it in
// flight: for when nothing in the pool is available and the least bad
// endpoint is tried anyway. A success on such a request closes an open
// breaker, as a probe's would; a failure leaves it as it is.
func (s *State) AdmitFallback(cfg *Config) Ticket {
	return s.ticket(cfg, s.gen(), fallback)
}

func (s *State) ticket(cfg *Config, gen uint32, kind ticketKind) Ticket {
	if cfg == nil {
		cfg = &defaultConfig
	}
	s.admitted.Add(1)
	s.changed()
	return Ticket{s: s, cfg: cfg, gen: gen, kind: kind}
}

var defaultConfig = Config{}.Normalize()

func (s *State) observe(t *Ticket, v Verdict, latency time.Duration, now time.Time) {
	switch v {
	case Success:
		s.successes.Add(1)
	case Failure:
		s.failures.Add(1)
	default:
		s.ignored.Add(1)
	}
	cfg := t.cfg
	if r := s.reporter.Load(); r != nil && v != Ignore {
		// A shared store learns the same outcome.
		(*r)(Report{Name: s.name, OK: v == Success, Latency: latency, At: now, Probe: t.kind != ordinary,
			SuccessDecay: cfg.SuccessDecay, LatencyDecay: cfg.LatencyDecay, Threshold: cfg.Threshold, Cooldown: cfg.Cooldown})
	}
	if v == Ignore {
		// Not the endpoint's doing: learn nothing, but free the probe slot
		// so another request can probe.
		if t.kind == probe {
			s.mu.Lock()
			if t.gen == s.gen() {
				s.probing.Store(false)
			}
			s.mu.Unlock()
		}
		return
	}
	ok := v == Success
	x := 0.0
	if ok {
		x = 1
	}
	blend(&s.success, x, cfg.SuccessDecay)
	if ok {
		sec := latency.Seconds()
		blend(&s.latency, sec, cfg.LatencyDecay)
		s.observePeak(sec, now, cfg.PeakDecay)
	}
	s.step(ok, t, now, cfg)
}

// blend folds the sample x into the EWMA kept in w with weight decay,
// without a lock: a concurrent outcome makes the swap fail, and the
// blend is done again on the value it left. An unmeasured latency is
// seeded with the first measure rather than decayed up from zero, which
// would make a slow endpoint look fast for its first few requests. A
// blend that leaves the value as it was (a healthy endpoint's success
// estimate, settled at 1) writes nothing: on the hot path it is the
// writes that cost, each a locked instruction and a cache line other
// cores must fetch again.
func blend(w *atomic.Uint64, x, decay float64) {
	for {
		old := w.Load()
		v := x
		if old != unmeasured {
			v = decay*x + (1-decay)*math.Float64frombits(old)
		}
		if math.Float64bits(v) == old || w.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// step moves the breaker on an outcome; only one of the current
// generation can. In the closed state, which every healthy endpoint is
// in, it counts the failures in a row without a lock, and takes it only
// to open; the rest (a probe's or a fallback's outcome) takes it.
func (s *State) step(ok bool, t *Ticket, now time.Time, cfg *Config) {
	if BreakerState(s.breaker.Load()) == Closed {
		s.count(ok, t, now, cfg)
		return
	}
	if t.kind == ordinary {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.gen != s.gen() {
		return
	}
	switch BreakerState(s.breaker.Load()) {
	case HalfOpen:
		if ok {
			s.close(now)
		} else {
			s.open(now, cfg)
		}
	case Open:
		if ok && t.kind == fallback {
			s.close(now)
		}
	}
}

// count counts an outcome of a closed breaker's generation toward the
// failures in a row: a success ends the run, and the failure that brings
// it to the threshold opens the breaker.
func (s *State) count(ok bool, t *Ticket, now time.Time, cfg *Config) {
	for {
		r := s.run.Load()
		if uint32(r>>32) != t.gen {
			return // a transition came between: the outcome is stale
		}
		n := uint32(r)
		if ok {
			if n == 0 || s.run.CompareAndSwap(r, r&^math.MaxUint32) {
				return
			}
			continue
		}
		if n == math.MaxUint32 {
			return // saturated: a threshold this high is never reached
		}
		if !s.run.CompareAndSwap(r, r+1) {
			continue
		}
		if int64(n)+1 >= int64(cfg.Threshold) {
			s.mu.Lock()
			if s.gen() == t.gen && BreakerState(s.breaker.Load()) == Closed {
				s.open(now, cfg)
			}
			s.mu.Unlock()
		}
		return
	}
}

// open opens the breaker until the cooldown has passed. Called with mu
// held.
func (s *State) open(now time.Time, cfg *Config) {
	s.nextGen()
	s.openUntil.Store(now.Add(cfg.Cooldown).UnixNano())
	s.breaker.Store(int32(Open))
	s.flags.Or(flagBreaker)
	s.probing.Store(false)
	s.opens.Add(1)
}

// close closes the breaker. Called with mu held.
func (s *State) close(now time.Time) {
	s.nextGen()
	s.upSince.Store(now.UnixNano())
	s.breaker.Store(int32(Closed))
	s.flags.And(^flagBreaker)
	s.probing.Store(false)
}

// peakResolution: a sample below the peak estimate that comes less than
// tau/peakResolution after the estimate was last updated is not taken in
// (it would move the estimate by less than 1/peakResolution of the way
// to it), and the time since the update is not reset either, so the next
// sample taken in carries the weight of all of it. The decay over time
// stays exact; a busy endpoint's estimate is written at most
// peakResolution times per tau for samples below it (about a hundred a
// second at the default 10 s) instead of on every outcome. Samples above
// it are always taken: the estimate is a peak.
const peakResolution = 1024

// observePeak updates the peak-EWMA latency (Finagle, linkerd): a sample
// above the estimate replaces it at once, one below pulls it down with a
// weight that grows with the time since the last update (see
// peakResolution). The value is swapped in without a lock and the time
// stored after it, so a reader may briefly see the new value with the
// previous time: an estimate decayed a little less than it will be.
func (s *State) observePeak(sec float64, now time.Time, tau time.Duration) {
	ns := now.UnixNano()
	for {
		old, stamp := s.peakValue.Load(), s.peakStamp.Load()
		peak := math.Float64frombits(old)
		if stamp == 0 || sec > peak {
			peak = sec
		} else {
			if ns-stamp < int64(tau)/peakResolution {
				return // too soon to move it: the next sample will
			}
			w := fade(float64(ns-stamp) / float64(tau))
			peak = peak*w + sec*(1-w)
		}
		if s.peakValue.CompareAndSwap(old, math.Float64bits(peak)) {
			break
		}
	}
	s.peakStamp.Store(ns)
}

// PeakLatency returns the peak-EWMA latency estimate at now, in seconds,
// decayed toward zero with time constant tau since the last sample: an
// endpoint that has not been used for a while looks cheaper, and is tried
// again. Measured reports whether there is a sample at all.
func (s *State) PeakLatency(now time.Time, tau time.Duration) (sec float64, measured bool) {
	return s.PeakLatencyAt(now.UnixNano(), tau)
}

// PeakLatencyAt is PeakLatency at now given in unix nanoseconds, as a
// pick that read the clock once passes it.
func (s *State) PeakLatencyAt(now int64, tau time.Duration) (sec float64, measured bool) {
	if s.peakStamp.Load() == 0 {
		return 0, false
	}
	v := math.Float64frombits(s.peakValue.Load())
	dt := float64(now - s.peakStamp.Load())
	if dt <= 0 || tau <= 0 {
		return v, true
	}
	return v * fade(dt/float64(tau)), true
}

// fade returns e^-x for x >= 0. A busy endpoint's estimates are read
// and updated within a small fraction of their time constant, where four
// terms of the series are within 1e-11 of the exponential and cost a
// tenth of it.
func fade(x float64) float64 {
	if x < 1.0/64 {
		return 1 - x*(1-x/2*(1-x/3*(1-x/4)))
	}
	return math.Exp(-x)
}

// Estimates are an endpoint's running estimates, as a policy weighs them.
type Estimates struct {
	Success float64 // success EWMA
	Latency float64 // latency EWMA, seconds; meaningful once Measured is set
	// Measured is when a latency was last taken into the peak estimate,
	// in Unix nanoseconds (a number, not a Time, as it is read on every
	// pick); 0 if never. On a busy endpoint it trails the last measure by
	// less than a thousandth of the peak's time constant.
	Measured int64
	// Outcomes counts the successes and failures seen: 0 means nothing
	// is known of the endpoint yet.
	Outcomes int64
}

// Estimates returns the running estimates without taking the lock: what
// a policy weighs on the pick path.
func (s *State) Estimates() Estimates {
	return Estimates{
		Success:  math.Float64frombits(s.success.Load()),
		Latency:  s.latencyEWMA(),
		Measured: s.peakStamp.Load(),
		Outcomes: s.successes.Load() + s.failures.Load(),
	}
}

// Score is article 001's score at now: success_ewma x 1/(1 + latency_ewma
// in seconds); exactly 0 while the breaker is open and cooling down. (A
// pool multiplies in an endpoint's cost factor.)
func (s *State) Score(now time.Time) float64 {
	if BreakerState(s.breaker.Load()) == Open && now.UnixNano() < s.openUntil.Load() {
		return 0
	}
	return s.ScoreIgnoringBreaker()
}

// ScoreIgnoringBreaker is the score as if the breaker were closed: what
// makes one endpoint less bad than another when every breaker is open.
// It reads the two estimates one after the other, without the lock: an
// outcome landing between the reads mixes one old and one new estimate,
// which a score read while outcomes arrive cannot tell from either.
func (s *State) ScoreIgnoringBreaker() float64 {
	return math.Float64frombits(s.success.Load()) / (1 + s.latencyEWMA())
}

// Snapshot is a consistent copy of a state, for status pages and metrics.
type Snapshot struct {
	Name                string       `json:"name"`
	SuccessEWMA         float64      `json:"success_ewma"`
	LatencyEWMA         float64      `json:"latency_ewma_seconds"`
	PeakLatency         float64      `json:"peak_latency_seconds"`
	Score               float64      `json:"score"`
	Breaker             BreakerState `json:"-"`
	BreakerName         string       `json:"breaker"`
	ConsecutiveFailures int          `json:"consecutive_failures"`
	Inflight            int64        `json:"inflight"`
	Draining            bool         `json:"draining"`
	Down                bool         `json:"down"`
	Samples             int64        `json:"samples"`
	Requests            int64        `json:"requests"`
	Successes           int64        `json:"successes"`
	Failures            int64        `json:"failures"`
	Ignored             int64        `json:"ignored"`
	Opens               int64        `json:"breaker_opens"`
	// Source says where the estimates and breaker came from: "local", or
	// "shared" when a shared store's copy was last adopted.
	Source string `json:"state_source"`
}

// Snapshot returns the state at now. Its words are read one after the
// other: taken while outcomes arrive, it may count an outcome in one
// figure and not yet in the next.
func (s *State) Snapshot(now time.Time) Snapshot {
	snap := Snapshot{
		Name:        s.name,
		SuccessEWMA: math.Float64frombits(s.success.Load()),
		LatencyEWMA: s.latencyEWMA(),
	}
	if BreakerState(s.breaker.Load()) == Closed {
		snap.ConsecutiveFailures = int(uint32(s.run.Load()))
	}
	snap.PeakLatency, _ = s.PeakLatency(now, DefaultPeakDecay)
	snap.Score = s.Score(now)
	snap.Breaker = s.Breaker(now)
	snap.BreakerName = snap.Breaker.String()
	snap.Inflight = s.Inflight()
	snap.Draining = s.Draining()
	snap.Down = s.Down()
	snap.Requests = s.admitted.Load()
	snap.Successes = s.successes.Load()
	snap.Failures = s.failures.Load()
	snap.Samples = snap.Successes + snap.Failures
	snap.Ignored = s.ignored.Load()
	snap.Opens = s.opens.Load()
	snap.Source = "local"
	if s.shared.Load() {
		snap.Source = "shared"
	}
	return snap
}
