package balance_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// Article 000's known answers: 5:1:1 gives a a b a c a a; 3:2 gives
// x y x y x over its first five, 6 and 4 over ten.
func TestSmoothWeightedKnownAnswers(t *testing.T) {
	p, _ := testPool(t, &balance.SmoothWeighted{}, "a=5", "b=1", "c=1")
	if got := sequence(t, p, 14); got != "aabacaa"+"aabacaa" {
		t.Errorf("5:1:1 gave %s, want aabacaa twice", got)
	}
	p, _ = testPool(t, &balance.SmoothWeighted{}, "x=3", "y=2")
	got := sequence(t, p, 10)
	if got[:5] != "xyxyx" || strings.Count(got, "x") != 6 || strings.Count(got, "y") != 4 {
		t.Errorf("3:2 gave %s, want xyxyx... with 6 x and 4 y", got)
	}
}

func longestRun(s string, c byte) int {
	best, run := 0, 0
	for i := range len(s) {
		if s[i] == c {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// Smooth stays smooth when an endpoint leaves mid-cycle or a weight changes.
func TestSmoothWeightedStaysSmooth(t *testing.T) {
	p, _ := testPool(t, &balance.SmoothWeighted{}, "a=5", "b=1", "c=1")
	sequence(t, p, 3)
	state(p, "c").SetDraining(true)
	got := sequence(t, p, 60)
	if strings.Contains(got, "c") || longestRun(got, 'a') > 5 || strings.Count(got, "b") != 10 {
		t.Errorf("with c out: %s, want a:b at 5:1 with no run of a over 5", got)
	}
	state(p, "c").SetDraining(false)
	// Change b's weight mid-cycle: the credits carry over by name.
	err := p.Configure(balance.Config{Policy: &balance.SmoothWeighted{}, Endpoints: []balance.EndpointConfig{
		{Name: "a", Weight: 5}, {Name: "b", Weight: 5}, {Name: "c", Weight: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got = sequence(t, p, 110)
	if longestRun(got, 'a') > 2 || longestRun(got, 'b') > 2 || strings.Count(got, "c") != 10 {
		t.Errorf("after b's weight went to 5: %s, want a and b interleaved, c 10 times", got)
	}
}

// An endpoint that was out takes its turns again within a cycle of its
// return; weights too large for a cycle are scaled, each keeping a turn.
func TestSmoothWeightedReturnsAndScales(t *testing.T) {
	p, _ := testPool(t, &balance.SmoothWeighted{}, "a=2", "b=1", "c=1")
	state(p, "c").SetDraining(true)
	if got := sequence(t, p, 12); strings.Contains(got, "c") || strings.Count(got, "a") != 8 {
		t.Fatalf("with c out: %s, want a:b at 2:1", got)
	}
	state(p, "c").SetDraining(false)
	sequence(t, p, 4) // the rest of a cycle
	if got := sequence(t, p, 40); strings.Count(got, "c") != 10 || strings.Count(got, "a") != 20 {
		t.Fatalf("c back: %s, want a:b:c at 2:1:1", got)
	}
	p, _ = testPool(t, &balance.SmoothWeighted{}, "big=1000000", "small=1", "mid=500000")
	c := counts(t, p, 3*65536, nil)
	if c["small"] < 1 || c["small"] > 6 || c["big"] < 2*c["mid"]-200 || c["big"] > 2*c["mid"]+200 {
		t.Fatalf("1000000:500000:1 over %d picks: %v", 3*65536, c)
	}
}

func TestRoundRobin(t *testing.T) {
	p, _ := testPool(t, &balance.RoundRobin{}, "a", "b", "c", "d")
	if got := sequence(t, p, 8); got != "abcdabcd" {
		t.Fatalf("got %s", got)
	}
	state(p, "b").SetDown(true, t0)
	c := counts(t, p, 300, nil)
	if c["b"] != 0 || c["a"] != 100 || c["c"] != 100 || c["d"] != 100 {
		t.Fatalf("with b down: %v, want a, c, d 100 each (no double share for c)", c)
	}
}

func TestRandomUniform(t *testing.T) {
	p, _ := testPool(t, balance.Random{}, letters(5)...)
	state(p, "e2").SetDraining(true)
	c := counts(t, p, 40000, nil)
	for _, n := range []string{"e0", "e1", "e3", "e4"} {
		if c[n] < 9500 || c[n] > 10500 {
			t.Errorf("%s got %d of 40000, want 10000 +- 5%%", n, c[n])
		}
	}
	if c["e2"] != 0 {
		t.Errorf("draining e2 got %d", c["e2"])
	}
}

func TestLeastConn(t *testing.T) {
	p, _ := testPool(t, balance.LeastConn{}, "a", "b", "c")
	// Ties at zero go to any, not always the first.
	c := counts(t, p, 3000, nil)
	for _, n := range []string{"a", "b", "c"} {
		if c[n] < 850 || c[n] > 1150 {
			t.Errorf("ties: %s got %d of 3000", n, c[n])
		}
	}
	// Held requests: the next goes to the least loaded.
	var held []balance.Pick
	for range 2 {
		pk, _ := p.Pick(balance.Request{})
		held = append(held, pk)
	}
	pk, _ := p.Pick(balance.Request{})
	for _, h := range held {
		if h.Endpoint == pk.Endpoint {
			t.Errorf("third request went to %s, which already has one", pk.Endpoint.Name)
		}
	}
}

// Mitzenmacher: 100,000 balls into 1,000 bins. One random choice leaves the
// fullest bin near 100 + sqrt(2*100*ln 1000) = 137; two choices near
// 100 + ln ln 1000 / ln 2 = 103.
func TestP2CBallsIntoBins(t *testing.T) {
	fullest := func(d int) int64 {
		pol, err := balance.NewP2C(d)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := testPool(t, pol, letters(1000)...)
		for range 100000 {
			if _, err := p.Pick(balance.Request{}); err != nil { // held: in-flight is the load
				t.Fatal(err)
			}
		}
		var m int64
		for _, ep := range p.Snapshot().Endpoints() {
			m = max(m, ep.State.Inflight())
		}
		return m
	}
	one, two := fullest(1), fullest(2)
	if two > 106 || one < 120 || two >= one {
		t.Fatalf("fullest bin: one choice %d, two choices %d; want two <= 106 and one >= 120", one, two)
	}
}

func TestWeightedLeastConn(t *testing.T) {
	p, _ := testPool(t, balance.WeightedLeastConn{}, "big=2", "small=1")
	// Hold 300 requests: in-flight settles at 2:1.
	for range 300 {
		if _, err := p.Pick(balance.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	big, small := state(p, "big").Inflight(), state(p, "small").Inflight()
	if big != 200 || small != 100 {
		t.Fatalf("in flight big %d small %d, want 200 and 100", big, small)
	}
}

func TestPeakEWMAPrefersFast(t *testing.T) {
	pol, _ := balance.NewPeakEWMA(2)
	p, clock := testPool(t, pol, "fast", "slow")
	c := map[string]int{}
	for range 2000 {
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			t.Fatal(err)
		}
		lat := 10 * time.Millisecond
		if pk.Endpoint.Name == "slow" {
			lat = 200 * time.Millisecond
		}
		clock.Advance(5 * time.Millisecond)
		c[pk.Endpoint.Name]++
		pk.Done(health.Outcome{Status: 200, Latency: lat})
	}
	if c["fast"] < 1800 {
		t.Fatalf("fast got %d of 2000, want over 1800 (%v)", c["fast"], c)
	}
	// The slow endpoint's estimate decays while unused, so it is retried.
	if c["slow"] == 0 {
		t.Fatal("slow was never retried")
	}
}

// A new endpoint with no latency measured takes one request of a burst,
// not half of it (Finagle's penalty for an unmeasured endpoint with
// requests pending); once it answers, it competes on its latency.
func TestPeakEWMAUnmeasuredEndpointWaitsForItsFirstAnswer(t *testing.T) {
	pol, _ := balance.NewPeakEWMA(2)
	p, _ := testPool(t, pol, "e0", "e1", "e2", "new")
	for _, name := range []string{"e0", "e1", "e2"} {
		observe(t, p, name, health.Success, 10*time.Millisecond, 5)
	}
	var held []balance.Pick
	c := map[string]int{}
	for range 1000 {
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			t.Fatal(err)
		}
		c[pk.Endpoint.Name]++
		held = append(held, pk)
	}
	if c["new"] != 1 {
		t.Fatalf("the unmeasured endpoint took %d of 1000 concurrent picks, want 1 (%v)", c["new"], c)
	}
	for _, pk := range held {
		lat := 10 * time.Millisecond
		if pk.Endpoint.Name == "new" {
			lat = 2 * time.Second
		}
		pk.Done(health.Outcome{Status: 200, Latency: lat})
	}
	// Measured at 2 s, it now gets a share by cost: next to nothing.
	c = counts(t, p, 1000, nil)
	if c["new"] > 10 {
		t.Errorf("the slow endpoint took %d of 1000 after its first answer", c["new"])
	}
}

// scoredPool gives e0..e2 weights 1, 0.5 and 0.25 (success 1; latencies
// 99, 199 and 399 ms, which with the 1 ms floor are 1, 2 and 4 times the
// best) by feeding each one success.
func scoredPool(t *testing.T, gamma float64) *balance.Pool {
	pol, err := balance.NewScored(gamma)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := testPool(t, pol, "e0", "e1", "e2")
	for name, lat := range map[string]time.Duration{"e0": 99 * time.Millisecond, "e1": 199 * time.Millisecond, "e2": 399 * time.Millisecond} {
		observe(t, p, name, health.Success, lat, 1)
	}
	return p
}

// shares picks n times, releasing every pick without an outcome so that
// nothing changes, and returns each endpoint's share.
func shares(t *testing.T, p *balance.Pool, n int) map[string]float64 {
	t.Helper()
	c := map[string]float64{}
	for range n {
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			t.Fatal(err)
		}
		c[pk.Endpoint.Name] += 1.0 / float64(n)
		pk.Release() // nothing learnt, nothing left in flight
	}
	return c
}

// The latency term is relative to the best endpoint: the same ratios give
// the same shares whether the endpoints answer in milliseconds or in
// seconds (the article's 1/(1 + seconds) would make 10 and 30 ms alike).
func TestScoredLatencyIsRelative(t *testing.T) {
	pol, _ := balance.NewScored(balance.DefaultGamma)
	var got [2]float64
	for i, scale := range []time.Duration{10 * time.Millisecond, time.Second} {
		p, _ := testPool(t, pol, "fast", "slow")
		observe(t, p, "fast", health.Success, scale, 1)
		observe(t, p, "slow", health.Success, 3*scale, 1)
		got[i] = shares(t, p, 40000)["slow"]
	}
	// 3x slower at gamma 2: (1/3)^2 = 1/9 of the fast one's weight, a
	// share of 0.1 (at 10 ms the 1 ms floor makes it 11/31: 0.112).
	for i, want := range []float64{(11.0 / 31) * (11.0 / 31) / (1 + (11.0/31)*(11.0/31)), 0.1} {
		if math.Abs(got[i]-want) > 0.01 {
			t.Errorf("slow share %.4f at scale %d, want %.4f", got[i], i, want)
		}
	}
}

// Requests in flight count: an endpoint with three waiting is expected
// to answer a new one in four times its latency, so that bursts do not
// herd onto whichever endpoint answered fastest last.
func TestScoredWeighsRequestsInFlight(t *testing.T) {
	pol, _ := balance.NewScored(2)
	p, _ := testPool(t, pol, "busy", "idle")
	observe(t, p, "busy", health.Success, 100*time.Millisecond, 1)
	observe(t, p, "idle", health.Success, 100*time.Millisecond, 1)
	ep := p.Snapshot().Get("busy")
	cfg := ep.Health()
	for range 3 {
		tk, ok := ep.State.Admit(p.Clock(), &cfg)
		if !ok {
			t.Fatal("busy refused a request")
		}
		defer tk.Release()
	}
	rel := 0.101 / (0.4 + 0.001)
	want := rel * rel / (1 + rel*rel)
	if got := shares(t, p, 40000)["busy"]; math.Abs(got-want) > 0.01 {
		t.Errorf("busy share %.4f, want %.4f", got, want)
	}
}

// A slow endpoint left alone fades toward the best with the peak decay's
// time constant, so it is tried again and a recovery is found out; an
// endpoint nothing is known of is tried first, one request at a time.
func TestScoredFadesOldLatencyAndTriesNewEndpoints(t *testing.T) {
	pol, _ := balance.NewScored(2)
	p, clock := testPool(t, pol, "fast", "slow", "new")
	observe(t, p, "slow", health.Success, 2*time.Second, 1)
	observe(t, p, "fast", health.Success, 100*time.Millisecond, 1)
	first, err := p.Pick(balance.Request{})
	if err != nil || first.Endpoint.Name != "new" {
		t.Fatalf("first pick %v (%v), want the unknown endpoint", first.Endpoint, err)
	}
	// Held: while its first request is out it takes no other.
	sh := shares(t, p, 30000)
	if sh["slow"] > 0.003 || sh["new"] != 0 {
		t.Errorf("shares %v: want slow near 0 and none for the unknown endpoint while its request is out", sh)
	}
	first.Done(health.Outcome{Status: 200, Latency: 100 * time.Millisecond})
	// Three time constants later, with fast measured again just now: the
	// excess over the best is 1.9 s x e^-3, a relative weight of
	// 0.101/(0.101 + 0.0946).
	clock.Advance(3 * health.DefaultPeakDecay)
	observe(t, p, "fast", health.Success, 100*time.Millisecond, 1)
	observe(t, p, "new", health.Success, 100*time.Millisecond, 1)
	rel := 0.101 / (0.101 + 1.9*math.Exp(-3))
	want := rel * rel / (2 + rel*rel)
	if got := shares(t, p, 40000)["slow"]; math.Abs(got-want) > 0.01 {
		t.Errorf("faded slow share %.4f, want %.4f", got, want)
	}
}

func TestScoredProportionalToScore(t *testing.T) {
	for _, tt := range []struct {
		gamma float64
		want  [3]float64 // shares
	}{
		{1, [3]float64{1 / 1.75, 0.5 / 1.75, 0.25 / 1.75}},
		{2, [3]float64{1 / 1.3125, 0.25 / 1.3125, 0.0625 / 1.3125}},
		{0, [3]float64{1.0 / 3, 1.0 / 3, 1.0 / 3}},
		{0.5, [3]float64{1 / (1 + math.Sqrt(0.5) + 0.5), math.Sqrt(0.5) / (1 + math.Sqrt(0.5) + 0.5), 0.5 / (1 + math.Sqrt(0.5) + 0.5)}},
	} {
		p := scoredPool(t, tt.gamma)
		// Picks are released without an outcome, so the weights stay put.
		sh := shares(t, p, 60000)
		for i, name := range []string{"e0", "e1", "e2"} {
			got := sh[name]
			if math.Abs(got-tt.want[i]) > 0.01 {
				t.Errorf("gamma %v: %s share %.4f, want %.4f +- 0.01", tt.gamma, name, got, tt.want[i])
			}
		}
	}
	if _, err := balance.NewScored(-1); err == nil {
		t.Error("negative gamma accepted")
	}
}

func TestScoredSkipsOpenAndFallsBack(t *testing.T) {
	pol, _ := balance.NewScored(1)
	p, clock := testPool(t, pol, "a", "b", "c")
	openBreaker(t, p, "a")
	c := counts(t, p, 3000, nil)
	if c["a"] != 0 {
		t.Fatalf("open a got %d picks", c["a"])
	}
	openBreaker(t, p, "b")
	openBreaker(t, p, "c")
	// Everything open: still tries the least bad, and says so.
	before := p.Stats().Fallbacks
	pk, err := p.Pick(balance.Request{})
	if err != nil || !pk.Fallback() {
		t.Fatalf("all open: pick %+v, err %v; want a fallback pick", pk, err)
	}
	pk.Done(health.Outcome{Status: 200})
	if p.Stats().Fallbacks != before+1 {
		t.Fatal("fallback not counted")
	}
	// A fallback success closes that breaker: it is evidence it works.
	if st := state(p, pk.Endpoint.Name); st.Breaker(clock.Now()) != health.Closed {
		t.Fatalf("fallback success left %s %v", pk.Endpoint.Name, st.Breaker(clock.Now()))
	}
}

// After the cooldown exactly one request probes the endpoint, however many
// picks race for it.
func TestHalfOpenSingleProbeThroughPool(t *testing.T) {
	p, clock := testPool(t, &balance.RoundRobin{}, "a", "b")
	openBreaker(t, p, "a")
	clock.Advance(health.DefaultCooldown)
	var held []balance.Pick
	probes := 0
	for range 50 {
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if pk.Endpoint.Name == "a" {
			probes++
			if !pk.Probe() {
				t.Fatal("a request went to a half-open endpoint without being the probe")
			}
		}
		held = append(held, pk)
	}
	if probes != 1 {
		t.Fatalf("%d requests went to a while half-open, want exactly 1", probes)
	}
	for _, pk := range held {
		pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond})
	}
	if b := state(p, "a").Breaker(clock.Now()); b != health.Closed {
		t.Fatalf("after a successful probe a is %v", b)
	}
}

func TestNoEndpoint(t *testing.T) {
	p, _ := testPool(t, &balance.RoundRobin{})
	if _, err := p.Pick(balance.Request{}); !errors.Is(err, balance.ErrNoEndpoint) {
		t.Fatalf("empty pool: %v", err)
	}
	p, _ = testPool(t, &balance.RoundRobin{}, "a")
	state(p, "a").SetDraining(true)
	if _, err := p.Pick(balance.Request{}); !errors.Is(err, balance.ErrNoEndpoint) {
		t.Fatalf("all draining: %v, want ErrNoEndpoint (draining never takes new requests)", err)
	}
	if p.Stats().Unavailable != 1 {
		t.Fatal("not counted")
	}
}

// Low weights defeat the O(1) rejection draws; the exact passes (buffered
// up to 64 endpoints, two-pass beyond) must keep the same proportions.
// Every endpoint has the same latency and a low success rate: 0.7^6 for
// the first half, 0.7^8 for the second, half as much.
func TestScoredExactPaths(t *testing.T) {
	for _, n := range []int{10, 100} {
		pol, _ := balance.NewScored(1)
		clock := health.NewManualClock(t0)
		p := balance.NewPool("test", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
		var eps []balance.EndpointConfig
		for _, name := range letters(n) {
			eps = append(eps, balance.EndpointConfig{Name: name})
		}
		if err := p.Configure(balance.Config{Policy: pol, Endpoints: eps, Health: health.Config{Threshold: 1000}}); err != nil {
			t.Fatal(err)
		}
		for i, ep := range p.Snapshot().Endpoints() {
			observe(t, p, ep.Name, health.Success, time.Second, 1)
			failures := 6
			if i >= n/2 {
				failures = 8
			}
			observe(t, p, ep.Name, health.Failure, 0, failures)
		}
		first := 0.0
		for name, share := range shares(t, p, 30000) {
			var i int
			_, _ = fmt.Sscanf(name, "e%d", &i)
			if i < n/2 {
				first += share
			}
		}
		if want := 1 / (1 + 0.49); math.Abs(first-want) > 0.012 {
			t.Errorf("n=%d: the half with twice the weight got %.4f of picks, want %.4f", n, first, want)
		}
	}
}

// least_conn and weighted_least_conn keep their endpoints indexed by load:
// under a random mix of picks, releases, drains and breakers, every pick
// is an available endpoint with the fewest in flight (per weight, for
// weighted_least_conn, over weights 1 to 4), as a scan of them all would
// find; past a reload the new snapshot's index takes over, and the old
// snapshot's picks (requests that took it before the swap) still find the
// least loaded.
func TestLeastConnIndexExact(t *testing.T) {
	for _, pol := range []balance.Policy{balance.LeastConn{}, balance.WeightedLeastConn{}} {
		t.Run(pol.Name(), func(t *testing.T) { testIndexExact(t, pol) })
	}
}

func testIndexExact(t *testing.T, pol balance.Policy) {
	names := letters(300)
	if _, weighted := pol.(balance.WeightedLeastConn); weighted {
		for i := range names {
			names[i] += "=" + strconv.Itoa(1+i%4)
		}
	}
	p, clock := testPool(t, pol, names...)
	rng := rand.New(rand.NewPCG(7, 7))
	var held []balance.Pick
	check := func(snap *balance.Snapshot, step int) {
		t.Helper()
		pk, err := snap.Pick(balance.Request{})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		// load/weight, weighing 1 for least_conn; pk is counted in flight
		// already: compare its load before.
		weight := func(ep *balance.Endpoint) int64 {
			if pol.Name() == "least_conn" {
				return 1
			}
			return int64(ep.Weight)
		}
		got, gotW := pk.Endpoint.State.Inflight(), weight(pk.Endpoint)
		for _, ep := range snap.Primaries().Endpoints() {
			if ep == pk.Endpoint || !snap.Primaries().Available(ep) {
				continue
			}
			if l, w := ep.State.Inflight()+1, weight(ep); l*gotW < got*w {
				t.Fatalf("step %d: picked %s with %d in flight (weight %d), %s had %d (weight %d)", step, pk.Endpoint.Name, got-1, gotW, ep.Name, l-1, w)
			}
		}
		held = append(held, pk)
	}
	old := p.Snapshot()
	for step := range 20000 {
		switch r := rng.IntN(100); {
		case r < 55 || len(held) == 0:
			check(p.Snapshot(), step)
		case r < 95:
			i := rng.IntN(len(held))
			held[i].Done(health.Outcome{Status: 200, Latency: time.Millisecond, At: clock.Now()})
			held[i] = held[len(held)-1]
			held = held[:len(held)-1]
		case r < 97:
			ep := p.Snapshot().Get(strings.Split(names[rng.IntN(len(names))], "=")[0])
			ep.State.SetDraining(!ep.State.Draining())
		case r < 98 && step > 10000 && old == p.Snapshot():
			// A reload: one endpoint fewer; in-flight counts carry over.
			if err := p.Configure(balance.Config{Policy: pol, Endpoints: endpointConfigs(names[1:])}); err != nil {
				t.Fatal(err)
			}
		default:
			check(old, step) // a straggler on the first snapshot
		}
	}
	for _, pk := range held {
		pk.Release()
	}
	if old == p.Snapshot() {
		t.Fatal("the reload never happened")
	}
}

// Under concurrent picks and releases the index ends where the counts
// are: every endpoint idle, and idle endpoints share the picks.
func TestLeastConnIndexConcurrent(t *testing.T) {
	p, _ := testPool(t, balance.LeastConn{}, letters(16)...)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []balance.Pick
			for i := range 5000 {
				pk, err := p.Pick(balance.Request{})
				if err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, pk)
				if i%3 != 0 {
					mine[0].Release()
					mine = mine[1:]
				}
			}
			for _, pk := range mine {
				pk.Release()
			}
		}()
	}
	wg.Wait()
	// All idle: 16 picks held at once land on 16 different endpoints.
	seen := map[string]bool{}
	for range 16 {
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if seen[pk.Endpoint.Name] {
			t.Fatalf("%s picked twice while others were idle", pk.Endpoint.Name)
		}
		seen[pk.Endpoint.Name] = true
	}
}
