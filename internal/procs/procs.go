// Package procs gives up one of Go's Ps at a time while the cores rotor
// runs on are full and its work fits in fewer, and gives them back as
// soon as the cores have time rotor could use.
//
// A proxy on cores it shares with busy neighbours (its backends, the
// clients' load, other services) gains nothing from a second P when the
// cores are full: the second thread takes time those neighbours need,
// and Go's scheduler hands work between its threads, each hand-over a
// wake of a sleeping thread (a futex call and a switch) on a core that
// had other work. On two cores shared with the load, rotor on one P served
// 1.09x the requests of two Ps at 50 connections, with a little more than
// half the p99 and 0.91x the CPU a request (docs/BENCHMARKS.md, "One P on
// full cores"). HAProxy and nginx pay no such price for a second thread
// or worker: each is an event loop of its own and nothing passes between
// them.
//
// So every window (a quarter second) the tuner looks at how busy the
// process's cores were and how much CPU rotor used. With the cores full
// (less than fullUnder of a core idle) and rotor's use within what one P
// fewer would carry (fitsIn of a P for each), for two windows on end, it
// sets GOMAXPROCS one lower. A window that finds the cores with room
// (roomFrom of a core idle or more) while rotor keeps its Ps busy
// (busyAt), or the cores more than half idle (idleAt), gives the Ps back
// at once (runtime.SetDefaultGOMAXPROCS: Go's own count, followed again
// as the machine's cores or the container's limit change); a P fewer that
// keeps up stays while the cores are busy. A GOMAXPROCS set in the
// environment is the runtime's alone: the tuner is not started.
//
// What it gives up: a neighbour that uses the cores for itself (not
// rotor's load or its backends) gets more of them from a rotor on fewer
// threads, as Linux shares a core among runnable threads.
package procs

import (
	"runtime"
	"sync"
	"time"

	"github.com/rotor-lb/rotor/internal/cores"
)

// The tuner's thresholds. The cores are full with less than fullUnder of
// a core idle across them (0.3: 85% busy on two cores, 96% on eight), and
// have room with roomFrom or more idle (0.4: 80% busy on two, 95% on
// eight). A P is given up after fullFor full windows on end in which
// rotor used no more than fitsIn of a P for each P it keeps (a little
// more than one, as one P spends less a request than more do). The Ps
// come back when the cores have room while rotor keeps busyAt of each P's
// time busy, or when the cores are more than half idle (idleAt).
const (
	fullUnder = 0.3
	roomFrom  = 0.4
	fitsIn    = 1.1
	fullFor   = 2
	busyAt    = 0.9
	idleAt    = 0.5
	windowFor = 250 * time.Millisecond
)

// tuner decides the Ps from the readings of each window.
type tuner struct {
	// What the tuner reads and sets: the cores' ticks, rotor's CPU time,
	// the Ps now, a count of Ps set, Go's own count set back.
	readCores func() (cores.Ticks, bool)
	readCPU   func() time.Duration
	procs     func() int
	set       func(int)
	reset     func()

	cores int // the cores the process may run on
	ticks cores.Ticks
	cpu   time.Duration
	full  int  // full windows on end
	fewer bool // the Ps were set below Go's own count
}

func newTuner() *tuner {
	return &tuner{
		cores:     runtime.NumCPU(),
		readCores: cores.Now,
		readCPU:   cores.CPU,
		procs:     func() int { return runtime.GOMAXPROCS(0) },
		set:       func(n int) { runtime.GOMAXPROCS(n) },
		reset:     runtime.SetDefaultGOMAXPROCS,
	}
}

// step takes a window's readings (since: how long it was) and sets the
// Ps if they say so.
func (t *tuner) step(since time.Duration) {
	ticks, ok := t.readCores()
	cpu := t.readCPU()
	last, lastCPU := t.ticks, t.cpu
	t.ticks, t.cpu = ticks, cpu
	busy, measured := ticks.Share(last) // not measured: no reading before
	if !ok || !measured || since <= 0 || cpu < lastCPU {
		if !ok && t.fewer {
			t.giveBack() // nothing to go by: Go's own count
		}
		return
	}
	used := float64(cpu-lastCPU) / float64(since) // in cores
	n := t.procs()
	idle := (1 - busy) * float64(t.cores) // in cores
	switch {
	case t.fewer && (busy < idleAt || idle >= roomFrom && used >= busyAt*float64(n)):
		t.full = 0
		t.giveBack()
	case idle < fullUnder && n > 1 && used <= fitsIn*float64(n-1):
		if t.full++; t.full >= fullFor {
			t.full = 0
			t.fewer = true
			t.set(n - 1)
		}
	default:
		t.full = 0
	}
}

func (t *tuner) giveBack() {
	t.fewer = false
	t.reset()
}

// Start runs the tuner until stop is called, which gives Go's own count
// back if the tuner had set fewer.
func Start() (stop func()) {
	t := newTuner()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(windowFor)
		defer tick.Stop()
		last := time.Now()
		t.step(0)
		for {
			select {
			case <-done:
				if t.fewer {
					t.giveBack()
				}
				return
			case now := <-tick.C:
				t.step(now.Sub(last))
				last = now
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}
