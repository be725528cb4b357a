package balance_test

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

func TestConfigureRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     balance.Config
		wantErr string
	}{
		{"no policy", balance.Config{}, "policy: required"},
		{"no name", balance.Config{Policy: balance.Random{}, Endpoints: []balance.EndpointConfig{{}}}, "endpoints[0].name: required"},
		{"duplicate", balance.Config{Policy: balance.Random{}, Endpoints: []balance.EndpointConfig{{Name: "a"}, {Name: "a"}}}, `endpoints[1].name: "a" appears twice`},
		{"weight", balance.Config{Policy: balance.Random{}, Endpoints: []balance.EndpointConfig{{Name: "a", Weight: -1}}}, "endpoints.a.weight: must be at least 1"},
		{"cost", balance.Config{Policy: balance.Random{}, Endpoints: []balance.EndpointConfig{{Name: "a", Cost: -1}}}, "endpoints.a.cost: must be zero or positive"},
		{"health", balance.Config{Policy: balance.Random{}, Health: health.Config{SuccessDecay: 2}}, "health.success_decay: must be in (0, 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := testPool(t, &balance.RoundRobin{}, "keep")
			err := p.Configure(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
			if len(p.Snapshot().Endpoints()) != 1 || p.Snapshot().Get("keep") == nil || p.Policy() != "round_robin" {
				t.Fatal("a refused config changed the pool")
			}
		})
	}
}

// State outlives config: an endpoint that stays keeps its in-flight count
// and breaker; one that leaves is forgotten, and its late Done is harmless.
func TestStateSurvivesReconfigure(t *testing.T) {
	p, clock := testPool(t, &balance.RoundRobin{}, "a", "b", "c")
	openBreaker(t, p, "a")
	held := pickKeyless(t, p) // b
	gone := pickKeyless(t, p) // c
	if held.Endpoint.Name != "b" || gone.Endpoint.Name != "c" {
		t.Fatalf("picked %s, %s", held.Endpoint.Name, gone.Endpoint.Name)
	}
	pol, _ := balance.NewScored(1)
	err := p.Configure(balance.Config{Policy: pol, Endpoints: []balance.EndpointConfig{{Name: "a"}, {Name: "b", Weight: 3}, {Name: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	if b := state(p, "a").Breaker(clock.Now()); b != health.Open {
		t.Fatalf("a's breaker is %v after reload, want still open", b)
	}
	if n := state(p, "b").Inflight(); n != 1 {
		t.Fatalf("b in flight %d after reload, want 1", n)
	}
	if p.Snapshot().Get("b").Weight != 3 || p.Policy() != "scored" {
		t.Fatal("new config not in force")
	}
	held.Done(health.Outcome{Status: 200})
	gone.Done(health.Outcome{Status: 200})
	if n := state(p, "b").Inflight(); n != 0 {
		t.Fatalf("b in flight %d, want 0", n)
	}
}

func pickKeyless(t *testing.T, p *balance.Pool) balance.Pick {
	t.Helper()
	pk, err := p.Pick(balance.Request{})
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// Many goroutines pick and finish while the control plane reconfigures: no
// race, and every in-flight count returns to exactly zero.
func TestConcurrentPicksDuringReconfigure(t *testing.T) {
	policies := func() []balance.Policy {
		p2c, _ := balance.NewP2C(2)
		peak, _ := balance.NewPeakEWMA(2)
		sc, _ := balance.NewScored(1)
		st, _ := balance.NewSticky(balance.StickyOptions{})
		ring, _ := balance.NewKeyed("ring", balance.KeyedOptions{})
		bnd, _ := balance.NewKeyed("bounded", balance.KeyedOptions{})
		return []balance.Policy{&balance.RoundRobin{}, balance.Random{}, balance.LeastConn{}, p2c,
			&balance.SmoothWeighted{}, balance.WeightedLeastConn{}, peak, sc, st, ring, bnd}
	}
	for _, pol := range policies() {
		t.Run(pol.Name(), func(t *testing.T) {
			p := balance.NewPool("c", balance.Options{})
			eps := func(n int) []balance.EndpointConfig {
				out := make([]balance.EndpointConfig, n)
				for i := range out {
					out[i] = balance.EndpointConfig{Name: "e" + strconv.Itoa(i), Weight: 1 + i%3}
				}
				return out
			}
			if err := p.Configure(balance.Config{Policy: pol, Endpoints: eps(8)}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var kept sync.Map // name -> *health.State, to check after
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						pk, err := p.Pick(balance.Request{Key: "k" + strconv.Itoa(i%50)})
						if err != nil {
							continue
						}
						kept.Store(pk.Endpoint.State, true)
						status := 200
						if (g+i)%7 == 0 {
							status = 503
						}
						pk.Done(health.Outcome{Status: status, Latency: time.Duration(i%5) * time.Millisecond})
					}
				}()
			}
			for i := range 50 {
				if err := p.Configure(balance.Config{Policy: pol, Endpoints: eps(4 + i%6)}); err != nil {
					t.Error(err)
				}
			}
			close(stop)
			wg.Wait()
			kept.Range(func(k, _ any) bool {
				if n := k.(*health.State).Inflight(); n != 0 {
					t.Errorf("%s: %d still in flight", k.(*health.State).Name(), n)
				}
				return true
			})
		})
	}
}

// backupPool is a pool of primaries p0, p1 and backups b0, b1 on round
// robin, with the extra config applied.
func backupPool(t *testing.T, c balance.Config) (*balance.Pool, *health.ManualClock) {
	t.Helper()
	p, clock := testPool(t, &balance.RoundRobin{}, "p0")
	c.Policy = &balance.RoundRobin{}
	c.Endpoints = []balance.EndpointConfig{{Name: "p0"}, {Name: "p1"}, {Name: "b0", Backup: true}, {Name: "b1", Backup: true}}
	if err := p.Configure(c); err != nil {
		t.Fatal(err)
	}
	return p, clock
}

// Backups take requests only while no primary is available, and give them
// back as soon as one is.
func TestBackupsOnlyWhenPrimariesAreOut(t *testing.T) {
	p, _ := backupPool(t, balance.Config{})
	if got := counts(t, p, 100, nil); got["b0"]+got["b1"] != 0 {
		t.Fatalf("backups took requests while primaries were up: %v", got)
	}
	openBreaker(t, p, "p0")
	state(p, "p1").SetDraining(true)
	got := counts(t, p, 100, nil)
	if got["b0"] != 50 || got["b1"] != 50 || p.Stats().Backups != 100 {
		t.Fatalf("primaries out: %v, backups counted %d; want 50/50 on the backups", got, p.Stats().Backups)
	}
	state(p, "p1").SetDraining(false)
	if got := counts(t, p, 10, nil); got["p1"] != 10 {
		t.Fatalf("a primary back: %v, want all on p1", got)
	}
	// Every endpoint out: the least bad primary, counted as a fallback.
	state(p, "p1").SetDown(true, t0)
	openBreaker(t, p, "b0")
	openBreaker(t, p, "b1")
	pk := pickKeyless(t, p)
	if !pk.Fallback() || pk.Endpoint.Backup || p.Stats().Fallbacks != 1 {
		t.Fatalf("all out: picked %s fallback=%v, stats %+v; want a primary as fallback", pk.Endpoint.Name, pk.Fallback(), p.Stats())
	}
	pk.Done(health.Outcome{Status: 200})
}

// Panic mode: below the threshold of healthy primaries, picks spread over
// every primary instead of piling on the few healthy ones; backups wait.
func TestPanicModeSpreadsOverAllPrimaries(t *testing.T) {
	p, _ := backupPool(t, balance.Config{PanicThreshold: 0.6})
	state(p, "p0").SetDown(true, t0) // half the primaries healthy: below 0.6
	got := counts(t, p, 1000, nil)
	if got["p0"] < 400 || got["p1"] < 400 || got["b0"]+got["b1"] != 0 {
		t.Fatalf("panic: %v, want about half each on p0 and p1, none on backups", got)
	}
	if p.Stats().Panics != 1000 {
		t.Fatalf("panic picks counted %d, want 1000", p.Stats().Panics)
	}
}

// Slow start: an endpoint that has just come back takes a growing share,
// on the pool's clock and random source.
func TestSlowStartRamps(t *testing.T) {
	p, clock := testPool(t, &balance.RoundRobin{}, "old")
	cfg := balance.Config{Policy: &balance.RoundRobin{}, SlowStart: time.Minute,
		Endpoints: []balance.EndpointConfig{{Name: "old"}, {Name: "new"}}}
	if err := p.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	state(p, "new").SetDown(true, clock.Now())
	state(p, "new").SetDown(false, clock.Now()) // back just now
	// Accepted with probability f on its turn, refused turns going to old
	// and leaving new's turn next: new serves f/(1+f) of the requests.
	share := func(f float64) {
		t.Helper()
		want := 2000 * f / (1 + f)
		if n := counts(t, p, 2000, nil)["new"]; math.Abs(float64(n)-want) > 0.25*want {
			t.Fatalf("at %v of the window: new got %d of 2000, want about %.0f", f, n, want)
		}
	}
	share(0.1) // the floor
	clock.Advance(30 * time.Second)
	share(0.5)
	clock.Advance(30 * time.Second) // window over
	if n := counts(t, p, 2000, nil)["new"]; n != 1000 {
		t.Fatalf("after the window: new got %d of 2000, want 1000", n)
	}
}

// An endpoint added to a pool that already serves (a reload, DNS) warms
// up like one that came back; the pool's first endpoints do not.
func TestSlowStartForNewEndpoints(t *testing.T) {
	p, clock := testPool(t, &balance.RoundRobin{})
	cfg := balance.Config{Policy: &balance.RoundRobin{}, SlowStart: time.Minute,
		Endpoints: []balance.EndpointConfig{{Name: "old"}}}
	if err := p.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if !state(p, "old").UpSince().IsZero() {
		t.Fatal("a pool's first endpoint warms up")
	}
	cfg.Endpoints = append(cfg.Endpoints, balance.EndpointConfig{Name: "new"})
	if err := p.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if n := counts(t, p, 2000, nil)["new"]; n < 100 || n > 260 {
		t.Fatalf("new, just added: %d of 2000, want about 180 (the 10%% floor)", n)
	}
	clock.Advance(time.Minute)
	if n := counts(t, p, 2000, nil)["new"]; n != 1000 {
		t.Fatalf("after the window: new got %d of 2000, want 1000", n)
	}
}

// A pin goes to its endpoint while it is available, past the policy; a
// tried endpoint is avoided while another can take the request.
func TestPinAndTried(t *testing.T) {
	p, _ := testPool(t, &balance.RoundRobin{}, "a", "b", "c")
	for range 5 {
		pk, err := p.Pick(balance.Request{Pin: "c"})
		if err != nil || pk.Endpoint.Name != "c" {
			t.Fatalf("pinned to c: got %v, %v", pk.Endpoint, err)
		}
		pk.Done(health.Outcome{Status: 200})
	}
	state(p, "c").SetDraining(true)
	if pk := pickPin(t, p, "c"); pk.Endpoint.Name == "c" {
		t.Fatal("a pin to a draining endpoint was followed")
	}
	state(p, "c").SetDraining(false)
	for range 20 {
		pk, err := p.Pick(balance.Request{Pin: "a", Tried: []string{"a", "b"}})
		if err != nil || pk.Endpoint.Name != "c" {
			t.Fatalf("a and b tried: got %v, %v, want c", pk.Endpoint, err)
		}
		pk.Done(health.Outcome{Status: 200})
	}
	// Everything tried: an endpoint is still given rather than none.
	pk, err := p.Pick(balance.Request{Tried: []string{"a", "b", "c"}})
	if err != nil || pk.Fallback() {
		t.Fatalf("all tried: %v fallback=%v, want an ordinary pick", err, pk.Fallback())
	}
	pk.Done(health.Outcome{Status: 200})
}

// firstAvailable is a policy that always picks the first available
// endpoint: the most a policy can lean toward one endpoint.
type firstAvailable struct{}

func (firstAvailable) Name() string { return "first" }
func (firstAvailable) Build(s *balance.Set) balance.Picker {
	return pickerFunc(func(balance.Request) (*balance.Endpoint, error) {
		for _, ep := range s.Endpoints() {
			if s.Available(ep) {
				return ep, nil
			}
		}
		return nil, balance.ErrNoEndpoint
	})
}

type pickerFunc func(balance.Request) (*balance.Endpoint, error)

func (f pickerFunc) Pick(r balance.Request) (*balance.Endpoint, error) { return f(r) }

// A retry never lands on the endpoint it failed on while another is
// available, however strongly the policy leans toward the first: after
// the policy's refused draws, an untried endpoint is drawn directly.
func TestRetryAvoidsTriedWhateverThePolicy(t *testing.T) {
	p, _ := testPool(t, firstAvailable{}, "a", "b", "c")
	seen := map[string]int{}
	for range 300 {
		pk, err := p.Pick(balance.Request{Tried: []string{"a"}})
		if err != nil {
			t.Fatal(err)
		}
		seen[pk.Endpoint.Name]++
		pk.Done(health.Outcome{Status: 200})
	}
	if seen["a"] != 0 || seen["b"] == 0 || seen["c"] == 0 {
		t.Fatalf("retries after a went %v: want none on a, spread over b and c", seen)
	}
}

func pickPin(t *testing.T, p *balance.Pool, pin string) balance.Pick {
	t.Helper()
	pk, err := p.Pick(balance.Request{Pin: pin})
	if err != nil {
		t.Fatal(err)
	}
	pk.Done(health.Outcome{Status: 200})
	return pk
}

// A snapshot built beside the running one changes nothing until it is
// published, and discarding it forgets only what it alone created.
func TestBuildAsideChangesNothingUntilPublished(t *testing.T) {
	store := health.NewMemoryStore()
	clock := health.NewManualClock(t0)
	ring, _ := balance.NewKeyed("ring", balance.KeyedOptions{})
	p := balance.NewPool("aside", balance.Options{Store: store, Clock: clock, Rand: balance.NewSeededRand(1)})
	run := balance.Config{Policy: ring, Endpoints: []balance.EndpointConfig{{Name: "a"}, {Name: "b"}, {Name: "c", MaxInflight: 5}}}
	if err := p.Configure(run); err != nil {
		t.Fatal(err)
	}
	owners := func() map[string]string {
		m := map[string]string{}
		for i := range 200 {
			k := "key" + strconv.Itoa(i)
			pk, err := p.Pick(balance.Request{Key: k})
			if err != nil {
				t.Fatal(err)
			}
			m[k] = pk.Endpoint.Name
			pk.Done(health.Outcome{Status: 200})
		}
		return m
	}
	before := owners()
	aside, err := p.Build(balance.Config{Policy: ring, Health: health.Config{Threshold: 1}, StartDown: true,
		Endpoints: []balance.EndpointConfig{{Name: "a", Weight: 9}, {Name: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := owners(); !maps.Equal(got, before) {
		t.Fatal("building a snapshot aside moved keys in the running one")
	}
	if p.Snapshot().Get("c").MaxInflight != 5 || p.Snapshot().Get("a").Health().Threshold != 3 {
		t.Fatal("building aside changed the running endpoints' settings")
	}
	if aside.Get("d").State.Down() != true || state(p, "a").Down() {
		t.Fatal("StartDown should mark only the new endpoint down")
	}
	if err := p.Discard(aside); err != nil {
		t.Fatal(err)
	}
	if got := store.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after discarding, the store holds %v, want a b c", got)
	}
	if err := p.Publish(aside); err != balance.ErrNotBuilt {
		t.Fatalf("publishing a discarded snapshot: %v, want ErrNotBuilt", err)
	}
	// Published: the new one serves, and endpoints that left are forgotten.
	next, _ := p.Build(balance.Config{Policy: ring, Endpoints: []balance.EndpointConfig{{Name: "a"}, {Name: "d"}}})
	if err := p.Publish(next); err != nil {
		t.Fatal(err)
	}
	if got := store.Names(); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("after publishing, the store holds %v, want a d", got)
	}
}

// Keys chosen by clients cannot grow the sticky table past its bound: a
// full table forgets its least recently seen key.
func TestStickyTableIsBounded(t *testing.T) {
	st, err := balance.NewSticky(balance.StickyOptions{MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := testPool(t, st, "a", "b", "c")
	for i := range 10_000 {
		pickKey(t, p, "client-"+strconv.Itoa(i))
	}
	stats := st.Stats()
	if stats.Entries > 64 || stats.Evicted < 10_000-64 {
		t.Fatalf("after 10,000 keys: %d entries, %d evicted; want at most 64 entries", stats.Entries, stats.Evicted)
	}
	if _, err := balance.NewSticky(balance.StickyOptions{MaxEntries: -1}); err == nil {
		t.Fatal("a negative max_entries was accepted")
	}
}

// No policy's Build touches what the running picker reads: a snapshot
// built over other endpoints and discarded leaves every key where it was.
func TestPoliciesBuildAside(t *testing.T) {
	policies := map[string]func() balance.Policy{
		"ring":        func() balance.Policy { p, _ := balance.NewKeyed("ring", balance.KeyedOptions{}); return p },
		"rendezvous":  func() balance.Policy { p, _ := balance.NewKeyed("rendezvous", balance.KeyedOptions{}); return p },
		"maglev":      func() balance.Policy { p, _ := balance.NewKeyed("maglev", balance.KeyedOptions{}); return p },
		"bounded":     func() balance.Policy { p, _ := balance.NewKeyed("bounded", balance.KeyedOptions{}); return p },
		"sticky_hash": func() balance.Policy { p, _ := balance.NewSticky(balance.StickyOptions{Hash: true}); return p },
		"sticky":      func() balance.Policy { p, _ := balance.NewSticky(balance.StickyOptions{}); return p },
	}
	for name, mk := range policies {
		t.Run(name, func(t *testing.T) {
			pol := mk()
			p, _ := testPool(t, pol, letters(8)...)
			owners := func() []string {
				var out []string
				for i := range 300 {
					pk, err := p.Pick(balance.Request{Key: "k" + strconv.Itoa(i)})
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, pk.Endpoint.Name)
					pk.Done(health.Outcome{Status: 200})
				}
				return out
			}
			before := owners()
			aside, err := p.Build(balance.Config{Policy: pol, Endpoints: []balance.EndpointConfig{{Name: "e0"}, {Name: "zz"}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := owners(); !slices.Equal(got, before) {
				t.Fatal("building a snapshot aside moved keys in the running one")
			}
			_ = p.Discard(aside)
			if got := owners(); !slices.Equal(got, before) {
				t.Fatal("discarding a snapshot moved keys in the running one")
			}
		})
	}
}
