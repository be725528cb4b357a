package balance

import (
	"slices"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/health"
)

// A least_conn index stops when its snapshot is replaced, also when it
// serves inside sticky: its watches are cleared (a picker built later
// holds them) and a pick that still reaches it scans.
func TestLeastConnIndexRetires(t *testing.T) {
	sticky, err := NewSticky(StickyOptions{Inner: LeastConn{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []Policy{LeastConn{}, sticky} {
		p := NewPool("test", Options{Clock: health.NewManualClock(time.Unix(0, 0)), Rand: NewSeededRand(1)})
		eps := []EndpointConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}}
		if err := p.Configure(Config{Policy: pol, Endpoints: eps}); err != nil {
			t.Fatal(err)
		}
		old := p.Snapshot()
		pk, err := p.Pick(Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		pk.Release()
		lc := indexOf(t, old.primary.picker)
		if lc.scan || lc.level == nil {
			t.Fatalf("%s: the index did not start at the first pick", pol.Name())
		}
		if err := p.Configure(Config{Policy: pol, Endpoints: eps[:2]}); err != nil {
			t.Fatal(err)
		}
		if !lc.scan {
			t.Fatalf("%s: the replaced snapshot's index still runs", pol.Name())
		}
		// Requests on the new snapshot move nothing in the old index.
		levels := slices.Clone(lc.level)
		var held []Pick
		for range 4 {
			pk, err := p.Pick(Request{})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, pk)
		}
		if !slices.Equal(levels, lc.level) {
			t.Fatalf("%s: the replaced index still follows the states: %v -> %v", pol.Name(), levels, lc.level)
		}
		for _, pk := range held {
			pk.Release()
		}
		if pk, err := old.Pick(Request{Key: "k"}); err != nil {
			t.Fatalf("%s: a straggler's pick on the old snapshot: %v", pol.Name(), err)
		} else {
			pk.Release()
		}
	}
}

func indexOf(t *testing.T, p Picker) *lcPicker {
	t.Helper()
	switch p := p.(type) {
	case *lcPicker:
		return p
	case *stickyPicker:
		return indexOf(t, p.inner)
	}
	t.Fatalf("no least_conn index in %T", p)
	return nil
}
