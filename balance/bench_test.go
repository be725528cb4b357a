package balance_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

func benchPolicies(b *testing.B) []balance.Policy {
	p2c, _ := balance.NewP2C(2)
	peak, _ := balance.NewPeakEWMA(2)
	sc, _ := balance.NewScored(1)
	st, _ := balance.NewSticky(balance.StickyOptions{})
	sth, _ := balance.NewSticky(balance.StickyOptions{Hash: true})
	ring, _ := balance.NewKeyed("ring", balance.KeyedOptions{})
	hrw, _ := balance.NewKeyed("rendezvous", balance.KeyedOptions{})
	mag, _ := balance.NewKeyed("maglev", balance.KeyedOptions{})
	bnd, _ := balance.NewKeyed("bounded", balance.KeyedOptions{})
	return []balance.Policy{&balance.RoundRobin{}, balance.Random{}, balance.LeastConn{}, p2c,
		&balance.SmoothWeighted{}, balance.WeightedLeastConn{}, peak, sc, st, sth, ring, hrw, mag, bnd}
}

func benchPool(b *testing.B, pol balance.Policy, n int) *balance.Pool {
	p := balance.NewPool("bench", balance.Options{})
	eps := make([]balance.EndpointConfig, n)
	for i := range eps {
		eps[i] = balance.EndpointConfig{Name: "e" + strconv.Itoa(i), Weight: 1 + i%4}
	}
	if err := p.Configure(balance.Config{Policy: pol, Endpoints: eps}); err != nil {
		b.Fatal(err)
	}
	// Give every endpoint some history so scores and latencies differ.
	for i := range 4 * n {
		pk, err := p.Pick(balance.Request{Key: "warm" + strconv.Itoa(i)})
		if err != nil {
			b.Fatal(err)
		}
		pk.Done(health.Outcome{Status: 200, Latency: time.Duration(1+i%9) * time.Millisecond})
	}
	return p
}

// at stands for the end time a proxy reads to measure latency.
var at = time.Now()

var keys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkPickDone: the whole cycle through a pool, Pick then Done, as a
// proxy runs it: picker, breaker admission, in-flight accounting, the
// outcome's classification and the EWMA and breaker update. The request
// carries the time it started and the outcome the time it was known, as
// a proxy's flight passes them (it read the clock for the total's
// deadline, and to measure the latency).
func BenchmarkPickDone(b *testing.B) {
	names := map[int]string{8: "sticky", 9: "sticky_hash"}
	for i, pol := range benchPolicies(b) {
		name := pol.Name()
		if n, ok := names[i]; ok {
			name = n
		}
		for _, n := range []int{8, 64, 1024} {
			p := benchPool(b, pol, n)
			cycle := func(i int) {
				pk, err := p.Pick(balance.Request{Key: keys[i&1023], At: at.UnixNano()})
				if err != nil {
					b.Fatal(err)
				}
				pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond, At: at})
			}
			runSingleAndParallel(b, name+"/n="+strconv.Itoa(n), cycle)
		}
	}
}

// BenchmarkPicker: the picker's choice alone, without the pool's admission
// and accounting, at n endpoints.
func BenchmarkPicker(b *testing.B) {
	names := map[int]string{8: "sticky", 9: "sticky_hash"}
	for i, pol := range benchPolicies(b) {
		name := pol.Name()
		if n, ok := names[i]; ok {
			name = n
		}
		for _, n := range []int{8, 64, 1024} {
			eps := make([]*balance.Endpoint, n)
			for j := range eps {
				eps[j] = &balance.Endpoint{Name: "e" + strconv.Itoa(j), Weight: 1 + j%4, State: health.NewState("e" + strconv.Itoa(j))}
			}
			pk := pol.Build(balance.NewSet(eps, health.SystemClock{}, balance.FastRand{}))
			obs, _ := pk.(balance.Observer)
			pick := func(i int) {
				ep, err := pk.Pick(balance.Request{Key: keys[i&1023]})
				if err != nil {
					b.Fatal(err)
				}
				if obs != nil {
					obs.Done(ep)
				}
			}
			runSingleAndParallel(b, name+"/n="+strconv.Itoa(n), pick)
		}
	}
}

// runSingleAndParallel runs op as sub-benchmark name on one goroutine,
// then as name/parallel with b.RunParallel.
func runSingleAndParallel(b *testing.B, name string, op func(i int)) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			op(i)
			i++
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				op(i)
				i++
			}
		})
	})
}

// BenchmarkLeastConnBusy: least_conn and weighted_least_conn when every
// endpoint has a request in flight: no idle one to draw, so every pick
// goes through the index (the picker alone, and the whole Pick+Done
// through a pool, weights 1 to 4 as in the other benchmarks).
func BenchmarkLeastConnBusy(b *testing.B) {
	cfg := health.Config{}.Normalize()
	for _, pol := range []balance.Policy{balance.LeastConn{}, balance.WeightedLeastConn{}} {
		prefix := ""
		if pol.Name() != "least_conn" {
			prefix = pol.Name() + "/"
		}
		for _, n := range []int{64, 1024} {
			eps := make([]*balance.Endpoint, n)
			for j := range eps {
				st := health.NewState("e" + strconv.Itoa(j))
				st.AdmitFallback(&cfg) // one request in flight on each, never released
				eps[j] = &balance.Endpoint{Name: "e" + strconv.Itoa(j), Weight: 1 + j%4, State: st}
			}
			pk := pol.Build(balance.NewSet(eps, health.SystemClock{}, balance.FastRand{}))
			b.Run(prefix+"n="+strconv.Itoa(n)+"/all busy", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := pk.Pick(balance.Request{}); err != nil {
						b.Fatal(err)
					}
				}
			})
			// The whole cycle with none idle: the pick goes through the
			// index, and the admit and release move the endpoint in it.
			p := benchPool(b, pol, n)
			for _, ep := range p.Snapshot().Endpoints() {
				ep.State.AdmitFallback(&cfg)
			}
			b.Run(prefix+"n="+strconv.Itoa(n)+"/all busy/pick+done", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					pk, err := p.Pick(balance.Request{At: at.UnixNano()})
					if err != nil {
						b.Fatal(err)
					}
					pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond, At: at})
				}
			})
		}
	}
}

// BenchmarkPickOwnerDown: keyed picks whose owner is down (its breaker
// open), at n endpoints: the walk to the next owner.
func BenchmarkPickOwnerDown(b *testing.B) {
	for _, algo := range []string{"ring", "rendezvous", "maglev"} {
		for _, n := range []int{64, 1024} {
			pol, err := balance.NewKeyed(algo, balance.KeyedOptions{})
			if err != nil {
				b.Fatal(err)
			}
			p := benchPool(b, pol, n)
			down := p.Snapshot().Get("e0")
			down.State.SetDown(true, time.Now())
			var owned []string // keys e0 owns
			for i := 0; len(owned) < 64 && i < 1_000_000; i++ {
				k := "key" + strconv.Itoa(i)
				down.State.SetDown(false, time.Now())
				pk, err := p.Pick(balance.Request{Key: k})
				down.State.SetDown(true, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				if pk.Endpoint == down {
					owned = append(owned, k)
				}
				pk.Done(health.Outcome{Status: 200})
			}
			b.Run(algo+"/n="+strconv.Itoa(n), func(b *testing.B) {
				i := 0
				for b.Loop() {
					pk, err := p.Pick(balance.Request{Key: owned[i%len(owned)]})
					if err != nil || pk.Endpoint == down {
						b.Fatal("picked the endpoint that is down", err)
					}
					pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond})
					i++
				}
			})
		}
	}
}

// BenchmarkStickyNewKeys: sticky's table when every key is new to it and
// it is full: each pick places a key with the inner policy, pins it and
// evicts the least recently seen, under its shard's lock.
func BenchmarkStickyNewKeys(b *testing.B) {
	st, err := balance.NewSticky(balance.StickyOptions{MaxEntries: 1024, Inner: &balance.RoundRobin{}})
	if err != nil {
		b.Fatal(err)
	}
	p := benchPool(b, st, 64)
	fresh := make([]string, 1<<16)
	for i := range fresh {
		fresh[i] = "new:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		pk, err := p.Pick(balance.Request{Key: fresh[i&(1<<16-1)], At: at.UnixNano()})
		if err != nil {
			b.Fatal(err)
		}
		pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond, At: at})
		i++
	}
	if s := st.Stats(); s.Evicted == 0 && b.N > 2048 {
		b.Fatalf("stats %+v: nothing evicted, so the keys were not new", s)
	}
}
