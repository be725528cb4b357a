// Package libs measures rotor's placers and health model against the Go
// libraries people use for the same jobs, on the same keys and nodes, in
// one run. It is a module of its own so that rotor's go.mod gains nothing.
//
//	cd bench/libs && go test -run TestBalance -v && go test -run '^$' -bench . -benchmem
//
// (bash bench/libs.sh runs both and writes bench/out/libs.txt.) Not
// reachable here, so not measured: dgryski/go-maglev (not served by the
// module proxy this project uses). stathat's ring is its GitHub path,
// whose own tests import its stathat.com path, which that proxy does not
// serve either: go mod tidy here needs -e.
package libs

import (
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	buraksezer "github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
	jump "github.com/dgryski/go-jump"
	rendezvous "github.com/dgryski/go-rendezvous"
	"github.com/golang/groupcache/consistenthash"
	"github.com/serialx/hashring"
	"github.com/sony/gobreaker/v2"
	stathat "github.com/stathat/consistent"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/placement"
)

// vnodes is every ring's points per node, where the library lets it be
// set: the same for all, so balance and speed compare at equal settings.
const vnodes = 100

var sizes = []int{10, 100, 1000}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "node" + strconv.Itoa(i)
	}
	return out
}

var keys = placement.Keys(100_000)

type member string

func (m member) String() string { return string(m) }

type xxHasher struct{}

func (xxHasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// lookup is one library's owner-of-key function over n nodes.
type lookup struct {
	name string
	make func(nodes []string) func(key string) string
}

func lookups() []lookup {
	return []lookup{
		{"rotor ring", func(nodes []string) func(string) string {
			r, _ := placement.NewRing(toNodes(nodes), placement.RingOptions{VNodes: vnodes})
			return func(k string) string { o, _ := r.Owner(k); return o }
		}},
		{"groupcache consistenthash", func(nodes []string) func(string) string {
			m := consistenthash.New(vnodes, crc32.ChecksumIEEE)
			m.Add(nodes...)
			return m.Get
		}},
		{"stathat/consistent", func(nodes []string) func(string) string {
			c := stathat.New()
			c.NumberOfReplicas = vnodes
			c.Set(nodes)
			return func(k string) string { o, _ := c.Get(k); return o }
		}},
		{"serialx/hashring (40 points)", func(nodes []string) func(string) string {
			r := hashring.New(nodes)
			return func(k string) string { o, _ := r.GetNode(k); return o }
		}},
		{"buraksezer/consistent", func(nodes []string) func(string) string {
			ms := make([]buraksezer.Member, len(nodes))
			for i, n := range nodes {
				ms[i] = member(n)
			}
			c := buraksezer.New(ms, buraksezer.Config{Hasher: xxHasher{}, PartitionCount: 7919, ReplicationFactor: vnodes, Load: 1.25})
			return func(k string) string { return c.LocateKey([]byte(k)).String() }
		}},
		{"rotor maglev", func(nodes []string) func(string) string {
			m, _ := placement.NewMaglev(toNodes(nodes), placement.MaglevOptions{})
			return func(k string) string { o, _ := m.Owner(k); return o }
		}},
		{"rotor rendezvous", func(nodes []string) func(string) string {
			r, _ := placement.NewRendezvous(toNodes(nodes))
			return func(k string) string { o, _ := r.Owner(k); return o }
		}},
		{"dgryski/go-rendezvous", func(nodes []string) func(string) string {
			r := rendezvous.New(nodes, xxhash.Sum64String)
			return r.Lookup
		}},
		{"rotor jump", func(nodes []string) func(string) string {
			j, _ := placement.NewJump(toNodes(nodes))
			return func(k string) string { o, _ := j.Owner(k); return o }
		}},
		{"dgryski/go-jump", func(nodes []string) func(string) string {
			return func(k string) string { return nodes[jump.Hash(xxhash.Sum64String(k), len(nodes))] }
		}},
	}
}

func toNodes(names []string) []placement.Node {
	out := make([]placement.Node, len(names))
	for i, n := range names {
		out[i] = placement.Node{Name: n}
	}
	return out
}

// TestBalance prints, for every library, how evenly 100,000 keys fall on
// 10, 100 and 1,000 nodes: the fullest node's keys over the mean (1 is
// perfect) and the standard deviation over the mean.
func TestBalance(t *testing.T) {
	for _, n := range sizes {
		nodes := names(n)
		for _, l := range lookups() {
			owner := l.make(nodes)
			counts := map[string]int{}
			for _, k := range keys {
				counts[owner(k)]++
			}
			mean := float64(len(keys)) / float64(n)
			most, sq := 0, 0.0
			for _, nd := range nodes {
				c := counts[nd]
				most = max(most, c)
				sq += (float64(c) - mean) * (float64(c) - mean)
			}
			if len(counts) > n {
				t.Fatalf("%s: keys on %d nodes, only %d exist", l.name, len(counts), n)
			}
			t.Logf("BALANCE n=%-5d %-30s max/mean %.3f  stddev/mean %.3f", n, l.name, float64(most)/mean, math.Sqrt(sq/float64(n))/mean)
		}
	}
}

// BenchmarkLookup is each library's owner lookup, one key at a time.
func BenchmarkLookup(b *testing.B) {
	for _, n := range sizes {
		nodes := names(n)
		for _, l := range lookups() {
			owner := l.make(nodes)
			b.Run(fmt.Sprintf("n=%d/%s", n, strings.ReplaceAll(l.name, "/", " ")), func(b *testing.B) {
				i := 0
				for b.Loop() {
					_ = owner(keys[i%len(keys)])
					i++
				}
			})
		}
	}
}

// BenchmarkBreaker is one request through a circuit breaker: admitted,
// its success recorded, released. gobreaker's Execute around an empty
// function against rotor's health state (which also keeps the success and
// latency EWMAs).
func BenchmarkBreaker(b *testing.B) {
	b.Run("sony/gobreaker Execute", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "bench"})
		b.ReportAllocs()
		for b.Loop() {
			_, _ = cb.Execute(func() (int, error) { return 0, nil })
		}
	})
	b.Run("rotor health Admit+Observe+Release", func(b *testing.B) {
		st := health.NewState("bench")
		cfg := health.Config{}.Normalize()
		clock := health.SystemClock{}
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			tk, ok := st.Admit(clock, &cfg)
			if !ok {
				b.Fatal("refused")
			}
			tk.Observe(health.Success, time.Millisecond, now)
			tk.Release()
		}
	})
	// The whole cycle a proxy runs, the breaker's part of it included:
	// the pool's fallback order, round robin over 64 endpoints, admission,
	// the outcome and the release.
	b.Run("rotor balance.Pool Pick+Done, round robin, 64 endpoints", func(b *testing.B) {
		p := balance.NewPool("bench", balance.Options{})
		eps := make([]balance.EndpointConfig, 64)
		for i := range eps {
			eps[i] = balance.EndpointConfig{Name: "e" + strconv.Itoa(i)}
		}
		if err := p.Configure(balance.Config{Policy: &balance.RoundRobin{}, Endpoints: eps}); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		at := now.UnixNano()
		b.ReportAllocs()
		for b.Loop() {
			pk, err := p.Pick(balance.Request{At: at})
			if err != nil {
				b.Fatal(err)
			}
			pk.Done(health.Outcome{Status: 200, Latency: time.Millisecond, At: now})
		}
	})
}
