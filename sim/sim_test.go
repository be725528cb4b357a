package sim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/sim"
)

func factory(name string) (balance.Policy, error) {
	return config.NewPolicy(name, config.PolicyParams{})
}

func runOne(t *testing.T, w sim.Workload, servers []sim.Server, policy string) sim.Result {
	t.Helper()
	clock := &sim.Clock{}
	pool := balance.NewPool("t", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
	p, err := factory(policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Configure(balance.Config{Policy: p, Endpoints: sim.Endpoints(servers)}); err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), w, servers, pool, clock, sim.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The simulator checked against queueing theory: an M/M/1 queue with
// arrival rate lambda and service rate mu has mean time in system
// 1/(mu - lambda); M/M/c's is given by Erlang's C formula.
func TestQueueingTheory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		lambda  float64
		mu      float64
	}{
		{"M/M/1 rho=0.5", 1, 50, 100},
		{"M/M/1 rho=0.8", 1, 80, 100},
		{"M/M/4 rho=0.75", 4, 300, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := sim.Workload{Requests: 1_000_000, Rate: tc.lambda, Service: time.Duration(1e9 / tc.mu), Seed: 42}
			res := runOne(t, w, []sim.Server{{Workers: tc.workers}}, "round_robin")
			want := mmcMean(tc.workers, tc.lambda, tc.mu)
			got := res.Mean.Seconds()
			if math.Abs(got-want)/want > 0.03 {
				t.Fatalf("mean time in system %.5fs, theory %.5fs (off by %.1f%%)", got, want, 100*math.Abs(got-want)/want)
			}
			if res.Requests != w.Requests || res.Failures != 0 {
				t.Fatalf("requests %d failures %d", res.Requests, res.Failures)
			}
		})
	}
}

// mmcMean is the mean time in system of an M/M/c queue (Erlang C).
func mmcMean(c int, lambda, mu float64) float64 {
	a := lambda / mu
	rho := a / float64(c)
	sum, term := 0.0, 1.0
	for k := range c {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	last := term * a / float64(c) / (1 - rho)
	pWait := last / (sum + last)
	return pWait/(float64(c)*mu-lambda) + 1/mu
}

func timeMicros(n int) time.Duration { return time.Duration(n) * time.Microsecond }
