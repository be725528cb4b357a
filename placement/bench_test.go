package placement_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/rotor-lb/rotor/placement"
)

var sink string

func benchKeys() []string { return placement.Keys(4096) }

// BenchmarkOwner: one lookup, per placer, at 10, 100 and 1000 nodes.
func BenchmarkOwner(b *testing.B) {
	keys := benchKeys()
	for _, algo := range []string{"ring", "ring-md5", "rendezvous", "jump", "maglev", "bounded", "modn"} {
		for _, n := range []int{10, 100, 1000} {
			p := all(b, nodes(letters(n)...))[algo]
			b.Run(algo+"/n="+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					sink, _ = p.Owner(keys[i&4095])
					i++
				}
			})
		}
	}
}

// BenchmarkOwners3: the owner and two replicas into a reused slice.
func BenchmarkOwners3(b *testing.B) {
	keys := benchKeys()
	for _, algo := range []string{"ring", "rendezvous", "jump", "maglev"} {
		p := all(b, nodes(letters(100)...))[algo]
		b.Run(algo+"/n=100", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]string, 0, 3)
			i := 0
			for b.Loop() {
				buf, _ = p.AppendOwners(buf[:0], keys[i&4095], 3)
				i++
			}
		})
	}
}

// BenchmarkBoundedAcquireRelease: one place-and-release cycle.
func BenchmarkBoundedAcquireRelease(b *testing.B) {
	keys := benchKeys()
	for _, n := range []int{10, 100, 1000} {
		p, _ := placement.NewBounded(nodes(letters(n)...), placement.BoundedOptions{})
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				name, _ := p.Acquire(keys[i&4095])
				p.Release(name)
				i++
			}
		})
	}
}

// BenchmarkRingBuild: a whole ring of 1000 nodes x 160 points. The
// retained-B metric is the heap the finished ring keeps.
func BenchmarkRingBuild(b *testing.B) {
	ns := nodes(letters(1000)...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := placement.NewRing(ns, placement.RingOptions{VNodes: 160}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep, _ := placement.NewRing(ns, placement.RingOptions{VNodes: 160})
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc)-float64(before.HeapAlloc), "retained-B")
	runtime.KeepAlive(keep)
}

// BenchmarkRingChange: one node joins a 1000 x 160 ring, merged into the
// sorted points (Add) or by rebuilding from the full set (Set); then leaves
// (Remove).
func BenchmarkRingChange(b *testing.B) {
	ns := nodes(letters(1000)...)
	grown := append(nodes(letters(1000)...), placement.Node{Name: "new"})
	b.Run("add", func(b *testing.B) {
		r, _ := placement.NewRing(ns, placement.RingOptions{VNodes: 160})
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Add(placement.Node{Name: "new"}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = r.Remove("new")
			b.StartTimer()
		}
	})
	b.Run("remove", func(b *testing.B) {
		r, _ := placement.NewRing(ns, placement.RingOptions{VNodes: 160})
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			_ = r.Add(placement.Node{Name: "new"})
			b.StartTimer()
			if err := r.Remove("new"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rebuild", func(b *testing.B) {
		r, _ := placement.NewRing(ns, placement.RingOptions{VNodes: 160})
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Set(grown); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMaglevBuild: the table of 65537 slots over 1000 nodes.
func BenchmarkMaglevBuild(b *testing.B) {
	ns := nodes(letters(1000)...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := placement.NewMaglev(ns, placement.MaglevOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
