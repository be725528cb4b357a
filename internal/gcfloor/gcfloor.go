// Package gcfloor keeps Go's collector from running while the heap is
// small: below a floor the heap may grow to the floor before a collection
// starts, above it the collector runs at the pace GOGC sets.
//
// A proxy keeps little alive (a few MB with its connections) and makes
// garbage with every request, so at GOGC's pace alone the heap's goal is
// a few MB and the collector runs tens of times a second, each run
// marking the same few MB again. Letting the heap reach a floor first
// (16 MiB for rotor serve) costs at most the floor in memory and cuts the runs
// by the ratio of the floor to the live heap; once the live heap is half
// the floor or more, nothing changes. After every collection the tuner
// sets GOGC so that the next goal is the larger of the floor and what the
// base GOGC would give.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// heapMinimum is the runtime's least heap goal at GOGC 100 (4 MiB); it
// scales it with GOGC, so a GOGC of p never lets a goal fall below
// heapMinimum*p/100.
const heapMinimum = 4 << 20

// Percent is the GOGC that makes the heap's goal after a collection that
// left live bytes the larger of floor and what base gives: base once live
// is half the floor or more (at base 100). The runtime's goal is the live
// heap grown by GOGC percent, and never below heapMinimum grown by GOGC
// percent: a GOGC that put that least goal above the floor would overshoot
// it, so no more than floor*100/heapMinimum (800 for 32 MiB) is set.
func Percent(floor, live uint64, base int) int {
	p := floor * 100 / heapMinimum
	switch {
	case live >= floor:
		p = 0
	case live > 0:
		p = min(p, (floor-live)*100/live)
	}
	return max(int(p), base)
}

// Start sets GOGC after every collection from then on, as Percent says,
// base being the GOGC wanted above the floor (100 is Go's default); base
// < 0 (collection off) leaves the collector alone. stop gives GOGC back
// its base.
func Start(floor uint64, base int) (stop func()) {
	if base < 0 {
		return func() {}
	}
	t := &tuner{floor: floor, base: base, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.tune()
	t.arm()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.stopped.Store(true)
			debug.SetGCPercent(base)
		})
	}
}

type tuner struct {
	floor   uint64
	base    int
	stopped atomic.Bool
	mu      sync.Mutex // one tune at a time; none after stop
	sample  []metrics.Sample
}

// sentinel is unreachable as soon as it is made: its finalizer runs after
// the next collection, tunes, and makes the next one.
type sentinel struct{ t *tuner }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{t: t}, func(s *sentinel) {
		if !s.t.stopped.Load() {
			s.t.tune()
			s.t.arm()
		}
	})
}

func (t *tuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	debug.SetGCPercent(Percent(t.floor, live, t.base))
}
