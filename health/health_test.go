package health_test

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/health"
)

// tuned is a State with the tuning every request in the test is admitted
// under, as a pool snapshot would give it.
type tuned struct {
	*health.State
	cfg *health.Config
}

func newState(t *testing.T, cfg health.Config) (tuned, *health.ManualClock) {
	t.Helper()
	cfg = cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return tuned{health.NewState("a"), &cfg}, health.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

func (s tuned) Admit(c health.Clock) (health.Ticket, bool) { return s.State.Admit(c, s.cfg) }

func admit(t *testing.T, s tuned, c *health.ManualClock) health.Ticket {
	t.Helper()
	tk, ok := s.Admit(c)
	if !ok {
		t.Fatalf("breaker refused a request in state %v", s.Breaker(c.Now()))
	}
	return tk
}

// finish reports an outcome on tk and ends its request.
func finish(tk health.Ticket, v health.Verdict, lat time.Duration, now time.Time) {
	tk.Observe(v, lat, now)
	tk.Release()
}

func fail(t *testing.T, s tuned, c *health.ManualClock) {
	t.Helper()
	finish(admit(t, s, c), health.Failure, 0, c.Now())
}

func succeed(t *testing.T, s tuned, c *health.ManualClock, lat time.Duration) {
	t.Helper()
	finish(admit(t, s, c), health.Success, lat, c.Now())
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Worked by hand, decay 0.3 from the optimistic start (success 1):
// fail -> 0.7, fail -> 0.49, success -> 0.3 + 0.343 = 0.643.
// Latency seeds on the first success (2 s), then 0.3*0.5 + 0.7*2 = 1.55.
func TestEWMAKnownAnswers(t *testing.T) {
	s, c := newState(t, health.Config{})
	fail(t, s, c)
	if got := s.Snapshot(c.Now()).SuccessEWMA; !near(got, 0.7) {
		t.Fatalf("after one failure: success %v, want 0.7", got)
	}
	fail(t, s, c)
	succeed(t, s, c, 2*time.Second)
	snap := s.Snapshot(c.Now())
	if !near(snap.SuccessEWMA, 0.643) || !near(snap.LatencyEWMA, 2) {
		t.Fatalf("success %v latency %v, want 0.643 and 2", snap.SuccessEWMA, snap.LatencyEWMA)
	}
	succeed(t, s, c, 500*time.Millisecond)
	snap = s.Snapshot(c.Now())
	if !near(snap.LatencyEWMA, 1.55) {
		t.Fatalf("latency %v, want 1.55", snap.LatencyEWMA)
	}
	// Latency is not updated on failure.
	finish(admit(t, s, c), health.Failure, 30*time.Second, c.Now())
	if got := s.Snapshot(c.Now()).LatencyEWMA; !near(got, 1.55) {
		t.Fatalf("a failure moved latency to %v", got)
	}
	wantScore := s.Snapshot(c.Now()).SuccessEWMA / (1 + 1.55)
	if got := s.Score(c.Now()); !near(got, wantScore) {
		t.Fatalf("score %v, want success/(1+latency) = %v", got, wantScore)
	}
}

func TestBreakerTransitions(t *testing.T) {
	cfg := health.Config{Threshold: 3, Cooldown: 15 * time.Second}
	s, c := newState(t, cfg)

	fail(t, s, c)
	fail(t, s, c)
	succeed(t, s, c, time.Millisecond) // resets the run
	fail(t, s, c)
	fail(t, s, c)
	if b := s.Breaker(c.Now()); b != health.Closed {
		t.Fatalf("2 consecutive failures: breaker %v, want closed", b)
	}
	fail(t, s, c)
	if b := s.Breaker(c.Now()); b != health.Open {
		t.Fatalf("3 consecutive failures: breaker %v, want open", b)
	}
	if s.Score(c.Now()) != 0 {
		t.Fatalf("open breaker scores %v, want exactly 0", s.Score(c.Now()))
	}
	if s.Available(c, 0) {
		t.Fatal("open breaker is available")
	}
	if _, ok := s.Admit(c); ok {
		t.Fatal("open breaker admitted a request")
	}

	c.Advance(15*time.Second - time.Nanosecond)
	if _, ok := s.Admit(c); ok {
		t.Fatal("admitted before the cooldown ended")
	}
	c.Advance(time.Nanosecond)
	if !s.Available(c, 0) || s.Score(c.Now()) == 0 {
		t.Fatal("after the cooldown the endpoint should be available for a probe, with its score")
	}
	probe := admit(t, s, c)
	if !probe.Probe() {
		t.Fatal("the first request after the cooldown is not the probe")
	}
	if s.Available(c, 0) {
		t.Fatal("available while the probe is out")
	}
	if _, ok := s.Admit(c); ok {
		t.Fatal("a second request went through while the probe is out")
	}
	// Probe failure reopens, with a fresh cooldown.
	finish(probe, health.Failure, 0, c.Now())
	if b := s.Breaker(c.Now()); b != health.Open {
		t.Fatalf("probe failure: breaker %v, want open", b)
	}
	c.Advance(14 * time.Second)
	if _, ok := s.Admit(c); ok {
		t.Fatal("reopened breaker admitted before its new cooldown")
	}
	c.Advance(time.Second)
	probe = admit(t, s, c)
	// A cancelled probe frees the slot for another.
	finish(probe, health.Ignore, 0, c.Now())
	probe = admit(t, s, c)
	if !probe.Probe() {
		t.Fatal("after a cancelled probe the next request is not a probe")
	}
	finish(probe, health.Success, time.Millisecond, c.Now())
	if b := s.Breaker(c.Now()); b != health.Closed {
		t.Fatalf("probe success: breaker %v, want closed", b)
	}
	if got := s.Snapshot(c.Now()).Opens; got != 2 {
		t.Fatalf("opened %d times, want 2", got)
	}
}

// An outcome admitted under an older breaker state feeds the EWMAs but
// cannot move the breaker.
func TestStaleOutcomeDropped(t *testing.T) {
	s, c := newState(t, health.Config{Threshold: 1, Cooldown: time.Second})
	old := admit(t, s, c) // admitted while closed
	fail(t, s, c)         // opens
	finish(old, health.Success, time.Millisecond, c.Now())
	if b := s.Breaker(c.Now()); b != health.Open {
		t.Fatalf("a stale success moved the breaker to %v", b)
	}
	if got := s.Snapshot(c.Now()).Samples; got != 2 {
		t.Fatalf("samples %d: the stale outcome should still feed the EWMAs", got)
	}
	// A fallback success (the pool tried it with nothing else left) closes.
	finish(s.AdmitFallback(s.cfg), health.Success, time.Millisecond, c.Now())
	if b := s.Breaker(c.Now()); b != health.Closed {
		t.Fatalf("fallback success: breaker %v, want closed", b)
	}
}

// A ticket resumed from its stub is the ticket: the probe stays the probe
// and closes the breaker, and a stale one still cannot move it.
func TestStubResumesTheTicket(t *testing.T) {
	s, c := newState(t, health.Config{Threshold: 1, Cooldown: time.Second})
	old := admit(t, s, c).Stub() // admitted while closed
	fail(t, s, c)                // opens
	c.Advance(time.Second)
	probe := admit(t, s, c).Stub()
	if !probe.Probe() || old.Probe() {
		t.Fatalf("stubs: probe %v, ordinary %v", probe.Probe(), old.Probe())
	}
	finish(s.Resume(s.cfg, old), health.Success, time.Millisecond, c.Now())
	if b := s.Breaker(c.Now()); b != health.HalfOpen {
		t.Fatalf("a stale success resumed from its stub moved the breaker to %v", b)
	}
	if s.Inflight() != 1 {
		t.Fatalf("in flight %d after the stale ticket's release, want the probe's 1", s.Inflight())
	}
	finish(s.Resume(s.cfg, probe), health.Success, time.Millisecond, c.Now())
	if b := s.Breaker(c.Now()); b != health.Closed || s.Inflight() != 0 {
		t.Fatalf("the probe resumed from its stub: breaker %v, %d in flight; want closed, 0", b, s.Inflight())
	}
}

// A failure admitted before the breaker last closed belongs to the old
// run: it does not count toward the threshold of the new one.
func TestStaleFailureStartsNoRun(t *testing.T) {
	s, c := newState(t, health.Config{Threshold: 2, Cooldown: time.Second})
	old := admit(t, s, c) // admitted while closed, in the first run
	fail(t, s, c)
	fail(t, s, c) // opens
	c.Advance(time.Second)
	finish(admit(t, s, c), health.Success, time.Millisecond, c.Now()) // the probe closes
	finish(old, health.Failure, 0, c.Now())
	if got := s.Snapshot(c.Now()).ConsecutiveFailures; got != 0 {
		t.Fatalf("a stale failure counted: %d in a row", got)
	}
	fail(t, s, c)
	if b := s.Breaker(c.Now()); b != health.Closed {
		t.Fatalf("one failure of the new run opened the breaker: %v", b)
	}
	fail(t, s, c)
	if b := s.Breaker(c.Now()); b != health.Open {
		t.Fatalf("two failures of the new run: breaker %v, want open", b)
	}
}

// A threshold of 3 is exactly 3 under contention: concurrent failures are
// never lost and never double-counted.
func TestThresholdExactUnderContention(t *testing.T) {
	for round := range 200 {
		s, c := newState(t, health.Config{Threshold: 3})
		tickets := make([]health.Ticket, 3)
		for i := range tickets {
			tickets[i] = admit(t, s, c)
		}
		var wg sync.WaitGroup
		for _, tk := range tickets[:2] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				finish(tk, health.Failure, 0, c.Now())
			}()
		}
		wg.Wait()
		if b := s.Breaker(c.Now()); b != health.Closed {
			t.Fatalf("round %d: open after 2 concurrent failures", round)
		}
		finish(tickets[2], health.Failure, 0, c.Now())
		if b := s.Breaker(c.Now()); b != health.Open {
			t.Fatalf("round %d: closed after 3 failures", round)
		}
	}
	// Many at once: exactly one opening, every failure counted.
	s, c := newState(t, health.Config{Threshold: 3})
	const n = 64
	tickets := make([]health.Ticket, n)
	for i := range tickets {
		tickets[i] = admit(t, s, c)
	}
	var wg sync.WaitGroup
	for _, tk := range tickets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			finish(tk, health.Failure, 0, c.Now())
		}()
	}
	wg.Wait()
	snap := s.Snapshot(c.Now())
	if snap.Opens != 1 || snap.Failures != n || snap.Samples != n || snap.Inflight != 0 {
		t.Fatalf("opens %d failures %d samples %d inflight %d, want 1 %d %d 0", snap.Opens, snap.Failures, snap.Samples, snap.Inflight, n, n)
	}
	if want := math.Pow(0.7, n); !near(snap.SuccessEWMA, want) {
		t.Fatalf("success EWMA %v, want 0.7^%d", snap.SuccessEWMA, n)
	}
}

func TestAvailability(t *testing.T) {
	s, c := newState(t, health.Config{})
	if !s.Available(c, 0) {
		t.Fatal("a new endpoint is not available")
	}
	s.SetDraining(true)
	if s.Available(c, 0) {
		t.Fatal("draining endpoint available")
	}
	s.SetDraining(false)
	s.SetDown(true, c.Now())
	if s.Available(c, 0) {
		t.Fatal("down endpoint available")
	}
	s.SetDown(false, c.Now())
	if !s.UpSince().Equal(c.Now()) {
		t.Fatal("coming back up did not start the slow-start window")
	}
	tk := admit(t, s, c)
	if s.Inflight() != 1 {
		t.Fatalf("admitted: in flight %d, want 1", s.Inflight())
	}
	tk.Observe(health.Success, time.Millisecond, c.Now())
	if s.Inflight() != 1 {
		t.Fatal("observing an outcome ended the request; only Release does")
	}
	tk.Release()
	if s.Inflight() != 0 {
		t.Fatalf("released: in flight %d, want 0", s.Inflight())
	}
	var zero health.Ticket
	zero.Observe(health.Failure, 0, c.Now()) // belongs to no endpoint: nothing happens
	zero.Release()
}

func TestPeakLatency(t *testing.T) {
	s, c := newState(t, health.Config{PeakDecay: 10 * time.Second})
	succeed(t, s, c, 100*time.Millisecond)
	succeed(t, s, c, 500*time.Millisecond) // a peak replaces at once
	if _, measured := health.NewState("new").PeakLatency(c.Now(), time.Second); measured {
		t.Fatal("a new endpoint has a peak latency measure")
	}
	if got, _ := s.PeakLatency(c.Now(), s.cfg.PeakDecay); !near(got, 0.5) {
		t.Fatalf("peak %v, want 0.5", got)
	}
	c.Advance(10 * time.Second)
	if got, _ := s.PeakLatency(c.Now(), s.cfg.PeakDecay); !near(got, 0.5*math.Exp(-1)) {
		t.Fatalf("after one time constant: %v, want 0.5/e", got)
	}
	succeed(t, s, c, 100*time.Millisecond) // below: pulled down by weight 1-1/e
	want := 0.5*math.Exp(-1) + 0.1*(1-math.Exp(-1))
	if got, _ := s.PeakLatency(c.Now(), s.cfg.PeakDecay); !near(got, want) {
		t.Fatalf("peak %v, want %v", got, want)
	}
}

// A sample below the peak that comes within a 1024th of the time
// constant is not taken in and does not reset the time: the next one
// taken carries the weight of all the time since the last update.
func TestPeakLatencyResolution(t *testing.T) {
	tau := 10 * time.Second
	s, c := newState(t, health.Config{PeakDecay: tau})
	succeed(t, s, c, 500*time.Millisecond)
	c.Advance(time.Millisecond) // under tau/1024 (9.77 ms)
	succeed(t, s, c, 100*time.Millisecond)
	decayed := func(d time.Duration) float64 { return math.Exp(-d.Seconds() / tau.Seconds()) }
	if got, _ := s.PeakLatency(c.Now(), tau); !near(got, 0.5*decayed(time.Millisecond)) {
		t.Fatalf("a sample below the peak, 1 ms after it: peak %v, want 0.5 decayed by 1 ms (untouched)", got)
	}
	if got := s.Estimates().Measured; got != c.Now().Add(-time.Millisecond).UnixNano() {
		t.Fatalf("measured at %v, want the peak's own time", time.Unix(0, got))
	}
	c.Advance(9 * time.Millisecond) // 10 ms since the update
	succeed(t, s, c, 100*time.Millisecond)
	w := decayed(10 * time.Millisecond)
	if got, _ := s.PeakLatency(c.Now(), tau); !near(got, 0.5*w+0.1*(1-w)) {
		t.Fatalf("10 ms after the update: peak %v, want %v (weighted by all 10 ms)", got, 0.5*w+0.1*(1-w))
	}
	if got := s.Estimates().Measured; got != c.Now().UnixNano() {
		t.Fatalf("measured at %v, want now", time.Unix(0, got))
	}
	succeed(t, s, c, 700*time.Millisecond) // above: taken at once, however soon
	if got, _ := s.PeakLatency(c.Now(), tau); !near(got, 0.7) {
		t.Fatalf("a sample above the peak: %v, want 0.7", got)
	}
}

func TestClassifier(t *testing.T) {
	def := health.MustClassifier(health.DefaultStatuses)
	route := health.MustClassifier(health.RouteStatuses)
	tests := []struct {
		name          string
		o             health.Outcome
		def, forRoute health.Verdict
	}{
		{"200", health.Outcome{Status: 200}, health.Success, health.Success},
		{"404 is the origin's answer", health.Outcome{Status: 404}, health.Success, health.Success},
		{"500", health.Outcome{Status: 500}, health.Failure, health.Failure},
		{"503", health.Outcome{Status: 503}, health.Failure, health.Failure},
		{"429", health.Outcome{Status: 429}, health.Failure, health.Failure},
		{"403 fails a route only", health.Outcome{Status: 403}, health.Success, health.Failure},
		{"407 fails a route only", health.Outcome{Status: 407}, health.Success, health.Failure},
		{"connect", health.Outcome{Err: health.ConnectError}, health.Failure, health.Failure},
		{"timeout", health.Outcome{Err: health.Timeout}, health.Failure, health.Failure},
		{"broken", health.Outcome{Err: health.Broken, Status: 200}, health.Failure, health.Failure},
		{"blocked", health.Outcome{Err: health.Blocked, Status: 200}, health.Failure, health.Failure},
		{"client cancel", health.Outcome{Err: health.Canceled, Status: 502}, health.Ignore, health.Ignore},
		{"rotor's own overload", health.Outcome{Err: health.Local, Status: 503}, health.Ignore, health.Ignore},
		{"the client's malformed body", health.Outcome{Err: health.Client, Status: 502}, health.Ignore, health.Ignore},
	}
	for _, tt := range tests {
		if got := def.Classify(tt.o); got != tt.def {
			t.Errorf("%s: default %v, want %v", tt.name, got, tt.def)
		}
		if got := route.Classify(tt.o); got != tt.forRoute {
			t.Errorf("%s: route %v, want %v", tt.name, got, tt.forRoute)
		}
	}
	for _, bad := range []string{"6xx", "99", "600", "abc", "5xx,,"} {
		if _, err := health.NewClassifier(bad); err == nil {
			t.Errorf("NewClassifier(%q) accepted", bad)
		}
	}
	c, err := health.NewClassifier("502, 4xx")
	if err != nil || !c.FailsOn(418) || !c.FailsOn(502) || c.FailsOn(500) {
		t.Errorf("custom classifier wrong: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     health.Config
		wantErr string
	}{
		{"defaults", health.Config{}, ""},
		{"decay above 1", health.Config{SuccessDecay: 1.5}, "success_decay: must be in (0, 1] (got 1.5)"},
		{"negative decay", health.Config{LatencyDecay: -0.1}, "latency_decay: must be in (0, 1]"},
		{"decay 1 is allowed", health.Config{SuccessDecay: 1}, ""},
		{"threshold", health.Config{Threshold: -1}, "threshold: must be at least 1 (got -1)"},
		{"cooldown", health.Config{Cooldown: -time.Second}, "cooldown: must be positive"},
		{"cost weight", health.Config{CostWeight: -1}, "cost_weight: must be zero or positive"},
		{"peak decay", health.Config{PeakDecay: -1}, "peak_decay: must be positive"},
	}
	for _, tt := range tests {
		err := tt.cfg.Normalize().Validate()
		if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.wantErr)
		}
	}
	d := health.Config{}.Normalize()
	if d.SuccessDecay != 0.3 || d.LatencyDecay != 0.3 || d.Threshold != 3 || d.Cooldown != 15*time.Second {
		t.Errorf("defaults %+v, want article 001's 0.3, 0.3, 3, 15s", d)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		health.EnvSuccessDecay: "0.5", health.EnvThreshold: "5", health.EnvCooldown: "30s",
	}
	cfg, err := health.Config{}.FromEnv(func(k string) string { return env[k] })
	if err != nil || cfg.SuccessDecay != 0.5 || cfg.Threshold != 5 || cfg.Cooldown != 30*time.Second || cfg.LatencyDecay != 0 {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	for name, val := range map[string]string{
		health.EnvSuccessDecay: "fast", health.EnvLatencyDecay: "x", health.EnvThreshold: "3.5", health.EnvCooldown: "15",
	} {
		_, err := health.Config{}.FromEnv(func(k string) string {
			if k == name {
				return val
			}
			return ""
		})
		if err == nil || !strings.HasPrefix(err.Error(), name+": ") {
			t.Errorf("%s=%q: err %v, want one naming the variable", name, val, err)
		}
	}
}

// States are reference-counted: the state lives while anything holds it,
// and only the last release forgets it.
func TestStoreCountsHolders(t *testing.T) {
	st := health.NewMemoryStore()
	a, created := st.Acquire("a")
	if !created {
		t.Fatal("the first Acquire did not create")
	}
	a.SetDraining(true)
	again, created := st.Acquire("a") // a second snapshot holding a
	if again != a || created || !again.Draining() {
		t.Fatal("the store did not hand back the same state")
	}
	st.Release("a") // one holder left
	if got, _ := st.Acquire("a"); got != a {
		t.Fatal("a state still held was forgotten")
	}
	st.Release("a")
	st.Release("a") // the last holder
	if fresh, created := st.Acquire("a"); fresh == a || !created || fresh.Draining() {
		t.Fatal("a forgotten state came back")
	}
	st.Release("nobody") // releasing what is not held changes nothing
	st.Acquire("b")
	if got := st.Names(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("names %v", got)
	}
}

// A shared copy that is missing (Redis restarted empty) does not close a
// breaker this instance opened; a transition of the shared breaker does.
func TestAdoptKeepsLocalBreakerWithoutSharedRecord(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := health.NewManualClock(now)
	st := health.NewState("a")
	cfg := health.Config{}.Normalize()
	st.Adopt(health.Shared{Samples: 5, Success: 0.9, Gen: 4}, now) // known, closed
	for range cfg.Threshold {
		tk, _ := st.Admit(clock, &cfg)
		tk.Observe(health.Failure, time.Millisecond, now)
		tk.Release()
	}
	if st.Breaker(now) != health.Open {
		t.Fatal("three failures did not open the breaker")
	}
	st.Adopt(health.Shared{}, now) // Redis restarted: no record
	if st.Breaker(now) != health.Open {
		t.Fatal("an empty shared copy closed a breaker this instance opened")
	}
	st.Adopt(health.Shared{Samples: 9, Success: 0.9, Gen: 5}, now) // another instance's probe closed it
	if st.Breaker(now) != health.Closed {
		t.Fatal("a shared transition to closed was not adopted")
	}
	if !st.IsShared() || st.Estimates().Success != 0.9 {
		t.Fatalf("estimates not adopted: %+v", st.Estimates())
	}
}
