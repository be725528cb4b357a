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

// Admits and releases do not take the index's lock: they mark the
// endpoint, and the next pick places what was marked before it looks. A
// picker seldom asked (sticky's, for keys it has not seen) pays a mark
// for each move and catches up at its next pick.
func TestLeastConnMovesMarkAndPicksCatchUp(t *testing.T) {
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
	if !lc.watching || lc.scan {
		t.Fatalf("after the first pick: watching %v, scan %v; want the index kept", lc.watching, lc.scan)
	}
	// Requests that do not ask the picker (a sticky pin's) with the
	// picker's lock held elsewhere: they must not wait for it.
	b := p.Snapshot().Get("b")
	cfg := health.Config{}.Normalize()
	var held []health.Ticket
	done := make(chan struct{})
	lc.mu.Lock()
	go func() {
		defer close(done)
		for range 100 {
			b.State.AdmitFallback(&cfg).Release()
		}
		held = append(held, b.State.AdmitFallback(&cfg), b.State.AdmitFallback(&cfg))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		lc.mu.Unlock()
		<-done
		t.Fatal("admits and releases waited for the picker's lock")
	}
	if got := lc.level[1]; got != 0 || lc.marks[0].Load()&2 == 0 {
		t.Fatalf("b moved without a pick: bucket %d, marks %b; want bucket 0 and b marked", got, lc.marks[0].Load())
	}
	lc.mu.Unlock()
	// The next pick places b first: with two in flight it is not chosen
	// while a and c are idle.
	for range 20 {
		pk, err := p.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		if pk.Endpoint.Name == "b" {
			t.Fatal("b, the busiest, picked: its moves were not taken in")
		}
		pk.Release()
	}
	if lc.level[1] != 2 {
		t.Fatalf("after a pick: b in bucket %d, want 2", lc.level[1])
	}
	for _, tk := range held {
		tk.Release()
	}
	if pk, err := p.Pick(Request{}); err != nil {
		t.Fatal(err)
	} else {
		pk.Release()
	}
	if lc.level[1] != 0 {
		t.Fatalf("b released: bucket %d, want 0", lc.level[1])
	}
}
