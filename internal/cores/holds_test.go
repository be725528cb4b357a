package cores

import (
	"testing"
	"time"
)

// TestHoldSpinsAndCounts: a held turn waits the hold out, and the time is
// counted as spun, for the next look to leave out.
func TestHoldSpinsAndCounts(t *testing.T) {
	const d = 200 * time.Microsecond
	before := Spun()
	start := time.Now()
	Hold(d)
	if took := time.Since(start); took < d {
		t.Errorf("a held turn took %v, want at least %v", took, d)
	}
	if held := Spun() - before; held < d {
		t.Errorf("spun %v counted, want at least %v", held, d)
	}
}

// TestGaugeLook: how busy the cores were is the larger of rotor's own
// share of its Ps and the cores' share, with the time spun left out of
// busy and kept in full; the first look only notes where things stand.
func TestGaugeLook(t *testing.T) {
	ticks, ticksOK := Ticks{Busy: 3000, Total: 10000}, true
	var cpu, spun time.Duration
	g := Gauge{
		ReadCores: func() (Ticks, bool) { return ticks, ticksOK },
		ReadCPU:   func() time.Duration { return cpu },
		ReadSpun:  func() time.Duration { return spun },
	}
	cpu, spun = time.Hour, time.Minute // since rotor started: not this look's
	if _, _, ok := g.Look(10*time.Second, 1); ok {
		t.Fatal("the first look gave shares, want none")
	}
	for _, step := range []struct {
		name       string
		cores      uint64 // busy ticks of 1000 (ten seconds)
		ticksOK    bool
		cpu, spun  time.Duration
		procs      int
		busy, full float64
	}{
		{"the cores busier than rotor", 600, true, 2 * time.Second, time.Second, 1, 0.5, 0.6},
		{"rotor busier than the cores", 100, true, 8 * time.Second, 0, 1, 0.8, 0.8},
		{"rotor's share of two Ps", 100, true, 8 * time.Second, 2 * time.Second, 2, 0.3, 0.4},
		{"the cores unread", 900, false, 5 * time.Second, time.Second, 1, 0.4, 0.5},
		{"all of it spun", 500, true, 0, 5 * time.Second, 1, 0, 0.5},
	} {
		ticks.Busy += step.cores
		ticks.Total += 1000
		ticksOK = step.ticksOK
		cpu += step.cpu
		spun += step.spun
		busy, full, ok := g.Look(10*time.Second, step.procs)
		if !ok {
			t.Fatalf("%s: no shares", step.name)
		}
		if !near(busy, step.busy) || !near(full, step.full) {
			t.Errorf("%s: busy %.3f, full %.3f; want %.3f, %.3f", step.name, busy, full, step.busy, step.full)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestHoldsDecide: turns are held with the cores busy but not full and
// enough going on at once; a full core (with the holds' spin or
// without), too little going on or too little work stops them, and each
// line has its hysteresis.
func TestHoldsDecide(t *testing.T) {
	h := Holds{From: 0.5, Until: 0.9}
	for _, step := range []struct {
		name       string
		busy, full float64
		many       bool
		on         bool
	}{
		{"little work", 0.40, 0.40, true, false},
		{"room, too little going on", 0.70, 0.70, false, false},
		{"room, much going on", 0.70, 0.70, true, true},
		{"full", 0.95, 0.95, true, false},
		{"under the line, within the hysteresis", 0.87, 0.87, true, false},
		{"room again", 0.80, 0.80, true, true},
		{"room, with the holds", 0.75, 0.90, true, true},
		{"full with the holds", 0.77, 0.97, true, false},
		{"room", 0.60, 0.60, true, true},
		{"less work, within the hysteresis", 0.47, 0.47, true, true},
		{"little work", 0.44, 0.44, true, false},
		{"within the hysteresis, from under", 0.47, 0.47, true, false},
		{"room", 0.60, 0.60, true, true},
		{"too little going on", 0.60, 0.60, false, false},
	} {
		h.Decide(step.busy, step.full, step.many)
		if h.On() != step.on {
			t.Errorf("%s: holding %v, want %v", step.name, h.On(), step.on)
		}
	}
	h.Off()
	if h.On() {
		t.Error("holding after Off")
	}
}
