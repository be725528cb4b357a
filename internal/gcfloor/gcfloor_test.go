package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// goal is the runtime's heap goal after a collection that left live
// bytes, at GOGC p (stacks and globals aside).
func goal(p int, live uint64) uint64 {
	return max(heapMinimum*uint64(p)/100, live+live*uint64(p)/100)
}

func TestPercentPutsTheGoalAtTheFloor(t *testing.T) {
	for _, floor := range []uint64{8 << 20, 32 << 20, 256 << 20} {
		for _, base := range []int{50, 100, 200} {
			for live := uint64(0); live <= 2*floor; live += floor / 64 {
				p := Percent(floor, live, base)
				if p < base {
					t.Fatalf("floor %d, live %d, base %d: GOGC %d under the base", floor, live, base, p)
				}
				want := max(floor, goal(base, live))
				if g := goal(p, live); g > want || g < want-want/16 {
					t.Errorf("floor %d MiB, live %d KiB, base %d: GOGC %d puts the goal at %d KiB, want %d KiB",
						floor>>20, live>>10, base, p, g>>10, want>>10)
				}
			}
		}
	}
	if p := Percent(2<<20, 0, 100); p != 100 {
		t.Errorf("a floor under the runtime's least goal: GOGC %d, want the base", p)
	}
}

func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// waitGOGC collects and waits for the tuner to set GOGC to what ok takes.
func waitGOGC(t *testing.T, what string, ok func(int) bool) {
	t.Helper()
	runtime.GC()
	for deadline := time.Now().Add(5 * time.Second); !ok(gogc(t)); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: GOGC still %d", what, gogc(t))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStartTunesAfterEveryCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const floor = 64 << 20 // this test's heap is a few MB
	stop := Start(floor, 100)
	defer stop()
	waitGOGC(t, "a small heap", func(p int) bool { return p > 100 })

	// A live heap past the floor: the base.
	big := make([]byte, 2*floor)
	waitGOGC(t, "a live heap twice the floor", func(p int) bool { return p == 100 })
	runtime.KeepAlive(big)
	big = nil
	waitGOGC(t, "the heap small again", func(p int) bool { return p > 100 })

	stop()
	if p := gogc(t); p != 100 {
		t.Errorf("stopped: GOGC %d, want the base", p)
	}
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if p := gogc(t); p != 100 {
		t.Errorf("collections after stop set GOGC to %d", p)
	}
}

func TestStartLeavesCollectionOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	stop := Start(64<<20, -1)
	defer stop()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if p := gogc(t); p != 100 {
		t.Errorf("base off: GOGC set to %d", p)
	}
}
