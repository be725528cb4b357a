package balance_test

import (
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
			if p.Set().Len() != 1 || p.Set().Get("keep") == nil || p.Policy() != "round_robin" {
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
	if p.Set().Get("b").Weight != 3 || p.Policy() != "scored" {
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
