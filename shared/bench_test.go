package shared_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/shared"
)

// BenchmarkPickDone: a whole Pick then Done through a pool of 8 endpoints
// under p2c, its health kept in memory or shared through a real Redis. The
// difference is the cost of queueing each outcome for Redis; the pick
// path itself never waits on it.
//
//	go test ./shared -run '^$' -bench PickDone -benchmem -count 5
func BenchmarkPickDone(b *testing.B) {
	r := testtool.Redis(b)
	for _, store := range []string{"memory", "redis"} {
		b.Run(store, func(b *testing.B) {
			opts := balance.Options{}
			var c *shared.Client
			if store == "redis" {
				var err error
				if c, err = shared.New(shared.Options{Addrs: []string{r.Addr}, Prefix: "bench:"}); err != nil {
					b.Fatal(err)
				}
				c.Start()
				defer c.Close()
				opts.Store = c.Store("bench")
			}
			p := balance.NewPool("bench", opts)
			pol, _ := balance.NewP2C(2)
			var eps []balance.EndpointConfig
			for i := range 8 {
				eps = append(eps, balance.EndpointConfig{Name: "e" + strconv.Itoa(i)})
			}
			if err := p.Configure(balance.Config{Policy: pol, Endpoints: eps}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				pk, err := p.Pick(balance.Request{})
				if err != nil {
					b.Fatal(err)
				}
				pk.Done(health.Outcome{Status: 200, Latency: time.Duration(1+i%9) * time.Millisecond})
			}
			b.StopTimer()
			if c != nil {
				st := c.Status()
				b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
			}
		})
	}
}
