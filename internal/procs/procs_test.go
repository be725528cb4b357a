package procs

import (
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/internal/cores"
)

// fake is a machine of some cores for the tuner: each window it is told
// how busy the cores were and how many cores' worth of CPU rotor used.
type fake struct {
	cores   int
	ticks   cores.Ticks
	cpu     time.Duration
	ok      bool
	procs   int
	def     int // Go's own count
	changes int
}

func (f *fake) tuner() *tuner {
	return &tuner{
		cores:     f.cores,
		readCores: func() (cores.Ticks, bool) { return f.ticks, f.ok },
		readCPU:   func() time.Duration { return f.cpu },
		procs:     func() int { return f.procs },
		set:       func(n int) { f.procs = n; f.changes++ },
		reset:     func() { f.procs = f.def; f.changes++ },
	}
}

// window has a quarter second pass, the cores busy for the share given
// and rotor using the cores' worth given, and the tuner step.
func (f *fake) window(t *tuner, busy, used float64) {
	const d = 250 * time.Millisecond
	f.ticks.Busy += uint64(busy * 100)
	f.ticks.Total += 100
	f.cpu += time.Duration(used * float64(d))
	t.step(d)
}

func TestTunerGivesUpPsOnFullCores(t *testing.T) {
	f := &fake{cores: 4, ok: true, procs: 4, def: 4, ticks: cores.Ticks{Busy: 500, Total: 1000}}
	tn := f.tuner()
	tn.step(0) // the first reading
	for _, w := range []struct {
		busy, used float64
		procs      int
		why        string
	}{
		{0.5, 2.5, 4, "time to spare: Go's count"},
		{0.95, 2.5, 4, "full, one window"},
		{0.95, 2.5, 3, "full two windows on end, 2.5 cores' worth fits in three Ps (3.3): one fewer"},
		{0.95, 2.5, 3, "full, one window at three"},
		{0.95, 2.5, 3, "full, 2.5 cores' worth does not fit in two Ps (2.2): kept"},
		{0.9, 1.0, 3, "0.4 of a core idle: not full, and rotor's Ps not busy: kept"},
		{0.95, 1.0, 3, "full, one window"},
		{0.9, 1.0, 3, "the full windows not on end: kept"},
		{0.95, 1.0, 3, "full, one window"},
		{0.95, 1.0, 2, "full two windows on end: one fewer"},
		{0.95, 1.0, 2, "full, one window at two"},
		{0.95, 1.0, 1, "1.0 fits in one P (1.1): one"},
		{0.99, 1.0, 1, "one P: no fewer"},
		{0.99, 1.0, 1, "one P: no fewer"},
		{0.7, 0.8, 1, "time to spare, rotor's P not busy: kept"},
		{0.6, 0.1, 1, "rotor nearly idle, the cores under half idle: kept"},
		{0.75, 0.95, 4, "time to spare and rotor's P busy: Go's count back at once"},
		{0.95, 1.0, 4, "full, one window"},
		{0.95, 1.0, 3, "one fewer"},
		{0.95, 1.0, 3, "full, one window at three"},
		{0.95, 1.0, 2, "one fewer"},
		{0.95, 1.9, 2, "two Ps busy, 0.2 of a core idle: kept"},
		{0.91, 1.9, 2, "two Ps busy, 0.36 of a core idle: no room, kept"},
		{0.88, 1.9, 4, "two Ps busy, 0.48 of a core idle: Go's count back"},
		{0.95, 1.0, 4, "full, one window"},
		{0.95, 1.0, 3, "one fewer"},
		{0.95, 1.0, 3, "full, one window at three"},
		{0.95, 1.0, 2, "one fewer"},
		{0.4, 0.0, 4, "the cores more than half idle: Go's count back"},
	} {
		f.window(tn, w.busy, w.used)
		if f.procs != w.procs {
			t.Fatalf("%s: %d Ps, want %d", w.why, f.procs, w.procs)
		}
	}
}

// A neighbour that keeps the cores full with rotor using more than one P
// fewer would carry leaves rotor its Ps.
func TestTunerKeepsPsItUses(t *testing.T) {
	f := &fake{cores: 2, ok: true, procs: 2, def: 2, ticks: cores.Ticks{Busy: 500, Total: 1000}}
	tn := f.tuner()
	tn.step(0)
	for range 10 {
		f.window(tn, 1, 1.3)
	}
	if f.procs != 2 || f.changes != 0 {
		t.Errorf("rotor using 1.3 of two full cores: %d Ps after %d changes, want 2 and none", f.procs, f.changes)
	}
}

// Cores that cannot be read give Go's count back, and nothing is set
// without a reading before.
func TestTunerWithoutReadings(t *testing.T) {
	f := &fake{cores: 2, ok: true, procs: 2, def: 2, ticks: cores.Ticks{Busy: 500, Total: 1000}}
	tn := f.tuner()
	for _, w := range []struct {
		read           bool
		procs, changes int
		why            string
	}{
		{true, 2, 0, "no reading before it"},
		{true, 2, 0, "one full window after the first reading"},
		{true, 1, 1, "full two windows on end"},
		{false, 2, 2, "cores unread: Go's count back"},
		{false, 2, 2, "cores unread while at Go's count: nothing set"},
	} {
		f.ok = w.read
		f.window(tn, 1, 0.9)
		if f.procs != w.procs || f.changes != w.changes {
			t.Fatalf("%s: %d Ps after %d changes, want %d after %d", w.why, f.procs, f.changes, w.procs, w.changes)
		}
	}
}

// Start runs its tuner against the runtime, and stop ends it (twice is
// once) with Go's count as it was: the tuner sets fewer Ps only with
// the cores full, and gives them back when stopped.
func TestStartStop(t *testing.T) {
	defer goleak.VerifyNone(t)
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	stop := Start()
	time.Sleep(3 * windowFor)
	stop()
	stop()
	if got := runtime.GOMAXPROCS(0); got != before && os.Getenv("GOMAXPROCS") == "" {
		t.Errorf("after stop: %d Ps, want %d", got, before)
	}
}
