package sim_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/sim"
)

// BenchmarkSimBalance: simulated requests per wall second through the
// balance engine, 16 servers, one policy per sub-benchmark, on one
// goroutine. The req/s metric is the figure; ns/op is per request.
func BenchmarkSimBalance(b *testing.B) {
	for _, name := range []string{"round_robin", "p2c", "least_conn", "peak_ewma", "scored", "sticky"} {
		b.Run(name, func(b *testing.B) {
			servers := make([]sim.Server, 16)
			for i := range servers {
				servers[i] = sim.Server{Workers: 1}
			}
			w := sim.Workload{Requests: b.N, Rate: 0.7 * 16 / 0.01, Service: 10 * time.Millisecond, Seed: 1}
			clock := &sim.Clock{}
			pool := balance.NewPool("b", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
			p, _ := factory(name)
			if err := pool.Configure(balance.Config{Policy: p, Endpoints: sim.Endpoints(servers)}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			if _, err := sim.Run(context.Background(), w, servers, sim.Rules{}.Lifecycle(pool, clock), clock, sim.Hooks{}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// BenchmarkInflightMemory: heap per simulated request in flight, measured
// with every request held in queue (arrivals far above capacity).
func BenchmarkInflightMemory(b *testing.B) {
	const n = 200000
	servers := []sim.Server{{Workers: 1}}
	for b.Loop() {
		w := sim.Workload{Requests: n, Rate: 1e9, Service: time.Hour, Seed: 1}
		clock := &sim.Clock{}
		pool := balance.NewPool("m", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
		_ = pool.Configure(balance.Config{Policy: &balance.RoundRobin{}, Endpoints: sim.Endpoints(servers)})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var peak uint64
		_, err := sim.Run(context.Background(), w, servers, sim.Rules{}.Lifecycle(pool, clock), clock, sim.Hooks{Progress: func(done int) {
			if done == n {
				runtime.ReadMemStats(&after)
				peak = after.HeapAlloc - before.HeapAlloc
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak)/n, "B/inflight")
	}
}
