package balance_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testPool builds a pool of endpoints named by names, each NAME or
// NAME=WEIGHT, with a manual clock and a seeded source.
func testPool(t testing.TB, policy balance.Policy, names ...string) (*balance.Pool, *health.ManualClock) {
	t.Helper()
	clock := health.NewManualClock(t0)
	p := balance.NewPool("test", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
	if err := p.Configure(balance.Config{Policy: policy, Endpoints: endpointConfigs(names)}); err != nil {
		t.Fatal(err)
	}
	return p, clock
}

// endpointConfigs makes an endpoint of each name, "name=weight" giving
// its weight.
func endpointConfigs(names []string) []balance.EndpointConfig {
	eps := make([]balance.EndpointConfig, len(names))
	for i, n := range names {
		eps[i] = balance.EndpointConfig{Name: n}
		if at := strings.IndexByte(n, '='); at >= 0 {
			w, _ := strconv.Atoi(n[at+1:])
			eps[i].Name, eps[i].Weight = n[:at], w
		}
	}
	return eps
}

func letters(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "e" + strconv.Itoa(i)
	}
	return out
}

// sequence picks n times, finishing each request at once.
func sequence(t testing.TB, p *balance.Pool, n int) string {
	t.Helper()
	var out []byte
	for range n {
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pk.Endpoint.Name...)
		pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond})
	}
	return string(out)
}

// counts picks n times, finishing each at once, and counts per endpoint.
func counts(t testing.TB, p *balance.Pool, n int, key func(i int) string) map[string]int {
	t.Helper()
	c := map[string]int{}
	for i := range n {
		r := balance.Request{}
		if key != nil {
			r.Key = key(i)
		}
		pk, err := p.Pick(r)
		if err != nil {
			t.Fatal(err)
		}
		c[pk.Endpoint.Name]++
		pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond})
	}
	return c
}

func state(p *balance.Pool, name string) *health.State { return p.Snapshot().Get(name).State }

// openBreaker fails an endpoint until its breaker opens.
func openBreaker(t testing.TB, p *balance.Pool, name string) {
	t.Helper()
	st := state(p, name)
	observe(t, p, name, health.Failure, 0, p.Snapshot().Get(name).Health().Threshold)

	if st.Breaker(p.Clock().Now()) != health.Open {
		t.Fatalf("%s did not open", name)
	}
}

// observe admits n requests on the named endpoint, past its policy, and
// reports verdict v with latency lat for each.
func observe(t testing.TB, p *balance.Pool, name string, v health.Verdict, lat time.Duration, n int) {
	t.Helper()
	ep := p.Snapshot().Get(name)
	cfg := ep.Health()
	for range n {
		tk, ok := ep.State.Admit(p.Clock(), &cfg)
		if !ok {
			t.Fatalf("%s refused a request", name)
		}
		tk.Observe(v, lat, p.Clock().Now())
		tk.Release()
	}
}
