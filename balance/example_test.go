package balance_test

import (
	"fmt"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// newExamplePool is a pool on a stopped clock with a seeded source, so the
// examples print the same every run.
func newExamplePool(policy balance.Policy, eps ...balance.EndpointConfig) *balance.Pool {
	p := balance.NewPool("example", balance.Options{Clock: health.NewManualClock(t0), Rand: balance.NewSeededRand(7)})
	if err := p.Configure(balance.Config{Policy: policy, Endpoints: eps}); err != nil {
		panic(err)
	}
	return p
}

func picks(p *balance.Pool, n int) string {
	out := ""
	for range n {
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			return out + " " + err.Error()
		}
		out += pk.Endpoint.Name
		pk.Done(health.Outcome{Status: 200, Latency: 20 * time.Millisecond})
	}
	return out
}

func ExamplePool() {
	p := balance.NewPool("api", balance.Options{})
	p2c, _ := balance.NewP2C(2)
	_ = p.Configure(balance.Config{Policy: p2c, Endpoints: []balance.EndpointConfig{
		{Name: "a", Addr: "10.0.0.1:80"}, {Name: "b", Addr: "10.0.0.2:80"},
	}})
	pk, err := p.Pick(balance.Request{})
	if err != nil {
		return // balance.ErrNoEndpoint: answer 503
	}
	start := time.Now()
	// ... send the request to pk.Endpoint.Addr ...
	v := pk.Done(health.Outcome{Status: 200, Latency: time.Since(start)})
	fmt.Println(v)
	// Output: success
}

func ExampleRoundRobin() {
	p := newExamplePool(&balance.RoundRobin{}, balance.EndpointConfig{Name: "a"}, balance.EndpointConfig{Name: "b"}, balance.EndpointConfig{Name: "c"})
	fmt.Println(picks(p, 7))
	// Output: abcabca
}

func ExampleSmoothWeighted() {
	p := newExamplePool(&balance.SmoothWeighted{},
		balance.EndpointConfig{Name: "a", Weight: 5}, balance.EndpointConfig{Name: "b", Weight: 1}, balance.EndpointConfig{Name: "c", Weight: 1})
	fmt.Println(picks(p, 7))
	// Output: aabacaa
}

func ExampleRandom() {
	p := newExamplePool(balance.Random{}, balance.EndpointConfig{Name: "a"}, balance.EndpointConfig{Name: "b"}, balance.EndpointConfig{Name: "c"})
	fmt.Println(picks(p, 12)) // seeded: the same every run
	// Output: babcccbbcbca
}

func ExampleLeastConn() {
	p := newExamplePool(balance.LeastConn{}, balance.EndpointConfig{Name: "a"}, balance.EndpointConfig{Name: "b"})
	held, _ := p.Pick(balance.Request{}) // one request in flight
	next, _ := p.Pick(balance.Request{})
	fmt.Println(held.Endpoint.Name != next.Endpoint.Name)
	// Output: true
}

func ExampleWeightedLeastConn() {
	p := newExamplePool(balance.WeightedLeastConn{}, balance.EndpointConfig{Name: "big", Weight: 3}, balance.EndpointConfig{Name: "small", Weight: 1})
	for range 40 {
		_, _ = p.Pick(balance.Request{}) // held
	}
	fmt.Println(p.Snapshot().Get("big").State.Inflight(), p.Snapshot().Get("small").State.Inflight())
	// Output: 30 10
}

func ExampleP2C() {
	p2c, _ := balance.NewP2C(2)
	p := newExamplePool(p2c, balance.EndpointConfig{Name: "a"}, balance.EndpointConfig{Name: "b"})
	for range 10 {
		_, _ = p.Pick(balance.Request{}) // held: two choices keep the two level
	}
	fmt.Println(p.Snapshot().Get("a").State.Inflight(), p.Snapshot().Get("b").State.Inflight())
	// Output: 5 5
}

func ExamplePeakEWMA() {
	peak, _ := balance.NewPeakEWMA(2)
	p := newExamplePool(peak, balance.EndpointConfig{Name: "fast"}, balance.EndpointConfig{Name: "slow"})
	for _, name := range []string{"fast", "slow"} {
		pk, _ := p.Pick(balance.Request{Pin: name}) // one request to each
		lat := map[string]time.Duration{"fast": 10 * time.Millisecond, "slow": 300 * time.Millisecond}[name]
		pk.Done(health.Outcome{Status: 200, Latency: lat})
	}
	pk, _ := p.Pick(balance.Request{})
	fmt.Println(pk.Endpoint.Name)
	// Output: fast
}

func ExampleScored() {
	scored, _ := balance.NewScored(1)
	p := newExamplePool(scored, balance.EndpointConfig{Name: "a"}, balance.EndpointConfig{Name: "b"})
	a := p.Snapshot().Get("a").State
	for range 3 { // three failures in a row open a's breaker
		pk, _ := p.Pick(balance.Request{Pin: "a"})
		pk.Done(health.Outcome{Status: 503})
	}
	fmt.Println(a.Score(p.Clock().Now()), picks(p, 5))
	// Output: 0 bbbbb
}

func ExampleSticky() {
	sticky, _ := balance.NewSticky(balance.StickyOptions{TTL: time.Hour})
	p := newExamplePool(sticky, balance.EndpointConfig{Name: "a"}, balance.EndpointConfig{Name: "b"}, balance.EndpointConfig{Name: "c"})
	first, _ := p.Pick(balance.Request{Key: "session-42"})
	first.Done(health.Outcome{Status: 200})
	again, _ := p.Pick(balance.Request{Key: "session-42"})
	fmt.Println(first.Endpoint == again.Endpoint, sticky.Stats().Hits)
	// Output: true 1
}

func ExampleKeyed() {
	ring, _ := balance.NewKeyed("ring", balance.KeyedOptions{})
	p := newExamplePool(ring, balance.EndpointConfig{Name: "cache-a"}, balance.EndpointConfig{Name: "cache-b"}, balance.EndpointConfig{Name: "cache-c"})
	pk, _ := p.Pick(balance.Request{Key: "/img/cat.png"})
	fmt.Println(pk.Endpoint.Name)
	// Output: cache-a
}
