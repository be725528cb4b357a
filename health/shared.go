package health

import (
	"math"
	"time"
)

// Report is one outcome as a shared store sends it on: everything another
// instance needs to apply the same update to the shared copy.
type Report struct {
	Name    string
	OK      bool
	Latency time.Duration
	At      time.Time
	// Probe: the request was the half-open probe, or was let past an open
	// breaker because nothing was available; its outcome may move an
	// open breaker.
	Probe bool
	// The tuning the request was admitted under.
	SuccessDecay, LatencyDecay float64
	Threshold                  int
	Cooldown                   time.Duration
}

// Reporter receives a state's outcomes as they are observed. It must not
// block: it is called on the request path, after the local update.
type Reporter func(Report)

// SetReporter makes s send every outcome that feeds its estimates (not
// the ignored ones) to r, besides learning from it. Nil stops it.
func (s *State) SetReporter(r Reporter) {
	if r == nil {
		s.reporter.Store(nil)
		return
	}
	s.reporter.Store(&r)
}

// Shared is an endpoint's state as every instance sees it: the copy a
// shared store keeps, updated by all of them.
type Shared struct {
	Success float64 // success EWMA
	Latency float64 // latency EWMA, seconds
	Timed   bool    // Latency holds a measure
	Samples int64   // outcomes that fed the EWMAs, from every instance
	// Open: the shared breaker is open (until OpenUntil).
	Open      bool
	OpenUntil time.Time
	// Gen counts the shared breaker's transitions: an instance adopts the
	// shared breaker when it moved, and otherwise keeps its own.
	Gen                        uint64
	Successes, Failures, Opens int64
}

// Adopt takes in the shared copy at now: the estimates become the shared
// ones (which count this instance's outcomes too), and a transition of
// the shared breaker since the last one adopted is applied here (opened
// by another instance's failures, or closed by another's probe). Between
// transitions the local breaker keeps its own judgement.
func (s *State) Adopt(sh Shared, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shared.Store(true)
	if sh.Samples > 0 {
		s.success.Store(math.Float64bits(sh.Success))
		if sh.Timed {
			s.latency.Store(math.Float64bits(sh.Latency))
		}
	}
	if sh.Samples == 0 || sh.Gen == s.sharedGen {
		// No shared record (none yet, or Redis restarted empty): nothing
		// to adopt, and a breaker this instance opened stays open.
		return
	}
	s.sharedGen = sh.Gen
	switch {
	case sh.Open && now.Before(sh.OpenUntil):
		s.openUntil.Store(sh.OpenUntil.UnixNano())
		if BreakerState(s.breaker.Load()) != Open {
			s.nextGen()
			s.breaker.Store(int32(Open))
			s.flags.Or(flagBreaker)
			s.probing.Store(false)
		}
	case !sh.Open && BreakerState(s.breaker.Load()) != Closed:
		s.close(now)
	}
}

// Unshare marks the state as this instance's alone: the shared store is
// out of reach, and what it shows is local.
func (s *State) Unshare() { s.shared.Store(false) }

// Shared reports whether the state last came from a shared store.
func (s *State) IsShared() bool { return s.shared.Load() }
