package cores

import (
	"math"
	"runtime"
	"testing"
	"time"
)

// TestSum adds up the ticks of the process's cores alone, from
// /proc/stat's lines for each core, and leaves out the total line, the
// other counters and a line it cannot read whole.
func TestSum(t *testing.T) {
	stat := []byte(`cpu  900 9 900 9000 90 9 9 9 0 0
cpu0 100 1 200 1000 10 2 3 4 0 0
cpu1 300 0 100 4000 20 0 1 0 0 0
cpu2 50 5 50 2000 5 1 1 1 7 7
cpu3 1 2 3 x 5 6 7 8 0 0
intr 12345 0 0
ctxt 987654
cpu12 1 1 1 1 1 1 1 1 0 0
`)
	mine := map[int]bool{0: true, 2: true, 3: true, 12: true}
	got := Sum(stat, func(n int) bool { return mine[n] })
	// busy: user, nice, system, irq, softirq, steal; total adds idle and iowait.
	want := Ticks{
		Busy:  (100 + 1 + 200 + 2 + 3 + 4) + (50 + 5 + 50 + 1 + 1 + 1) + 6,
		Total: (100 + 1 + 200 + 1000 + 10 + 2 + 3 + 4) + (50 + 5 + 50 + 2000 + 5 + 1 + 1 + 1) + 8,
	}
	if got != want {
		t.Errorf("Sum = %+v, want %+v", got, want)
	}
}

// TestShare is the busy part of the ticks between two readings, and no
// share when the readings do not bound any time.
func TestShare(t *testing.T) {
	then := Ticks{Busy: 300, Total: 1000}
	for _, c := range []struct {
		now, then Ticks
		share     float64
		ok        bool
	}{
		{Ticks{Busy: 375, Total: 1100}, then, 0.75, true},
		{Ticks{Busy: 300, Total: 1100}, then, 0, true},
		{Ticks{Busy: 400, Total: 1100}, then, 1, true},
		{then, then, 0, false},                             // no time passed
		{Ticks{Busy: 200, Total: 1100}, then, 0, false},    // busy went back
		{Ticks{Busy: 400, Total: 1100}, Ticks{}, 0, false}, // no reading before
		{Ticks{Busy: 300, Total: 900}, then, 0, false},     // total went back
	} {
		share, ok := c.now.Share(c.then)
		if share != c.share || ok != c.ok {
			t.Errorf("%+v.Share(%+v) = %v, %v; want %v, %v", c.now, c.then, share, ok, c.share, c.ok)
		}
	}
}

// TestShareWithout leaves time a process spent spinning out of the busy
// ticks (at 100 a second), never below none.
func TestShareWithout(t *testing.T) {
	then := Ticks{Busy: 300, Total: 1000}
	for _, c := range []struct {
		now   Ticks
		idle  time.Duration
		share float64
		ok    bool
	}{
		{Ticks{Busy: 375, Total: 1100}, 0, 0.75, true},
		{Ticks{Busy: 375, Total: 1100}, 250 * time.Millisecond, 0.5, true},
		{Ticks{Busy: 375, Total: 1100}, 2 * time.Second, 0, true}, // more than was busy
		{then, time.Second, 0, false},
	} {
		share, ok := c.now.ShareWithout(then, c.idle)
		if math.Abs(share-c.share) > 1e-9 || ok != c.ok {
			t.Errorf("%+v.ShareWithout(%+v, %v) = %v, %v; want %v, %v", c.now, then, c.idle, share, ok, c.share, c.ok)
		}
	}
}

// TestNow reads this machine's ticks, and the process's CPU time, where
// they can be read.
func TestNow(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, ok := Now(); ok {
			t.Errorf("Now: read outside Linux")
		}
		return
	}
	got, ok := Now()
	if !ok || got.Total == 0 || got.Busy > got.Total {
		t.Errorf("Now() = %+v, %v: want this machine's ticks", got, ok)
	}
	before := CPU()
	for i := 0; CPU() == before && i < 1e9; i++ {
	}
	if after := CPU(); after <= before {
		t.Errorf("CPU() did not grow with work: %v then %v", before, after)
	}
}
