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

// A least_conn index asked seldom (sticky's, for keys it has not seen)
// lets its watches go after idleMoves moves without a pick, and its next
// pick builds it again from the counts then.
func TestLeastConnIndexSleepsWhenIdle(t *testing.T) {
	p := NewPool("test", Options{Clock: health.NewManualClock(time.Unix(0, 0)), Rand: NewSeededRand(1)})
	eps := []EndpointConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	if err := p.Configure(Config{Policy: LeastConn{}, Endpoints: eps}); err != nil {
		t.Fatal(err)
	}
	pk, err := p.Pick(Request{})
	if err != nil {
		t.Fatal(err)
	}
	pk.Release()
	lc := indexOf(t, p.Snapshot().primary.picker)
	if !lc.watching || lc.idleMoves != 2*3+64 {
		t.Fatalf("after the first pick: watching %v, idle moves %d; want the index kept, let go after 70", lc.watching, lc.idleMoves)
	}
	// Requests that do not ask the picker (a sticky pin's) move the index
	// until it lets go; then they move nothing. The picked request's
	// admit and release were two moves already.
	b := p.Snapshot().Get("b")
	cfg := health.Config{}.Normalize()
	for range (lc.idleMoves - 2) / 2 {
		b.State.AdmitFallback(&cfg).Release()
	}
	if !lc.watching {
		t.Fatalf("let go after %d moves, before its %d", lc.moves, lc.idleMoves)
	}
	b.State.AdmitFallback(&cfg).Release()
	if lc.watching {
		t.Fatalf("still watching after %d moves without a pick", lc.idleMoves+1)
	}
	was := lc.level[1]
	held := []health.Ticket{b.State.AdmitFallback(&cfg), b.State.AdmitFallback(&cfg)}
	if got := lc.level[1]; got != was {
		t.Fatalf("b's bucket moved from %d to %d while the index was let go", was, got)
	}
	// The next pick builds it again: b, with two in flight, is not chosen
	// while a and c are idle, and the index follows changes again.
	for range 20 {
		pk, err := p.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		if pk.Endpoint.Name == "b" {
			t.Fatal("b, the busiest, picked after the index was built again")
		}
		pk.Release()
	}
	if !lc.watching || lc.level[1] != 2 {
		t.Fatalf("after a pick: watching %v, b in bucket %d; want watching, 2", lc.watching, lc.level[1])
	}
	for _, tk := range held {
		tk.Release()
	}
	if lc.level[1] != 0 {
		t.Fatalf("b released: bucket %d, want 0", lc.level[1])
	}
}
