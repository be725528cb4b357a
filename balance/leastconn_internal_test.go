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
		busy := loadAll(old)
		pk, err := p.Pick(Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		pk.Release()
		lc := indexOf(t, old.primary.picker)
		if lc.scan || lc.level == nil {
			t.Fatalf("%s: the index did not start at the first pick with no endpoint idle", pol.Name())
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
		for _, tk := range busy {
			tk.Release()
		}
	}
}

// loadAll puts one request in flight on every endpoint of snap, so that
// none is idle and a least_conn pick needs its index.
func loadAll(snap *Snapshot) []health.Ticket {
	cfg := health.Config{}.Normalize()
	var held []health.Ticket
	for _, ep := range snap.Endpoints() {
		held = append(held, ep.State.AdmitFallback(&cfg))
	}
	return held
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
// lets its watches go after idleMoves moves without a pick; then picks
// draw idle endpoints without it, and the first that finds none builds
// it again from the counts then.
func TestLeastConnIndexSleepsWhenIdle(t *testing.T) {
	p := NewPool("test", Options{Clock: health.NewManualClock(time.Unix(0, 0)), Rand: NewSeededRand(1)})
	eps := []EndpointConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	if err := p.Configure(Config{Policy: LeastConn{}, Endpoints: eps}); err != nil {
		t.Fatal(err)
	}
	busy := loadAll(p.Snapshot())
	pk, err := p.Pick(Request{})
	if err != nil {
		t.Fatal(err)
	}
	pk.Release()
	for _, tk := range busy {
		tk.Release()
	}
	lc := indexOf(t, p.Snapshot().primary.picker)
	if !lc.watching.Load() || lc.idleMoves != 2*3+64 {
		t.Fatalf("after a pick with none idle: watching %v, idle moves %d; want the index kept, let go after 70", lc.watching.Load(), lc.idleMoves)
	}
	// Requests that do not ask the picker (a sticky pin's) move the index
	// until it lets go; then they move nothing. The picked request's
	// admit and release, and the three held before it released, were five
	// moves already.
	b := p.Snapshot().Get("b")
	cfg := health.Config{}.Normalize()
	for range (lc.idleMoves - 5) / 2 {
		b.State.AdmitFallback(&cfg).Release()
	}
	if !lc.watching.Load() {
		t.Fatalf("let go after %d moves, before its %d", lc.moves, lc.idleMoves)
	}
	b.State.AdmitFallback(&cfg).Release()
	if lc.watching.Load() {
		t.Fatalf("still watching after %d moves without a pick", lc.idleMoves+1)
	}
	was := lc.level[1]
	held := []health.Ticket{b.State.AdmitFallback(&cfg), b.State.AdmitFallback(&cfg)}
	if got := lc.level[1]; got != was {
		t.Fatalf("b's bucket moved from %d to %d while the index was let go", was, got)
	}
	// a and c idle: picks draw them, never b, and build nothing.
	for range 20 {
		pk, err := p.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		if pk.Endpoint.Name == "b" {
			t.Fatal("b, the busiest, picked while a and c were idle")
		}
		pk.Release()
	}
	if lc.watching.Load() {
		t.Fatal("the index was built while idle endpoints were there to draw")
	}
	// None idle: the next pick builds the index, and takes a or c (one in
	// flight) over b (three).
	more := []health.Ticket{p.Snapshot().Get("a").State.AdmitFallback(&cfg), p.Snapshot().Get("c").State.AdmitFallback(&cfg)}
	pk, err = p.Pick(Request{})
	if err != nil {
		t.Fatal(err)
	}
	if pk.Endpoint.Name == "b" {
		t.Fatal("b, the busiest, picked by the index")
	}
	if !lc.watching.Load() || lc.level[1] != 2 {
		t.Fatalf("after a pick with none idle: watching %v, b in bucket %d; want watching, 2", lc.watching.Load(), lc.level[1])
	}
	pk.Release()
	for _, tk := range append(held, more...) {
		tk.Release()
	}
	if lc.level[1] != 0 {
		t.Fatalf("b released: bucket %d, want 0", lc.level[1])
	}
}

// While most endpoints are idle least_conn draws one, without its index;
// when none is idle it builds the index; once three quarters are idle
// again, after twice as many picks as endpoints, it lets the index go.
func TestLeastConnDrawsWhileMostAreIdle(t *testing.T) {
	p := NewPool("test", Options{Clock: health.NewManualClock(time.Unix(0, 0)), Rand: NewSeededRand(3)})
	var eps []EndpointConfig
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		eps = append(eps, EndpointConfig{Name: n})
	}
	if err := p.Configure(Config{Policy: LeastConn{}, Endpoints: eps}); err != nil {
		t.Fatal(err)
	}
	lc := indexOf(t, p.Snapshot().primary.picker)
	seen := map[string]int{}
	for range 800 {
		pk, err := p.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		seen[pk.Endpoint.Name]++
		pk.Release()
	}
	if lc.watching.Load() || lc.level != nil {
		t.Fatal("all idle, and the index was built")
	}
	for _, ep := range eps {
		if n := seen[ep.Name]; n < 60 || n > 140 {
			t.Fatalf("%s drawn %d times of 800; want about 100 each: %v", ep.Name, n, seen)
		}
	}
	// One endpoint idle: the draws may miss it, and the index finds it.
	busy := loadAll(p.Snapshot())
	busy[1].Release() // b idle, the rest busy
	busy = append(busy[:1], busy[2:]...)
	var held []Pick
	for range 8 {
		pk, err := p.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, pk)
	}
	if !lc.watching.Load() {
		t.Fatal("none idle after the first picks, and no index")
	}
	for _, pk := range held {
		pk.Release()
	}
	for _, tk := range busy {
		tk.Release()
	}
	// All idle again: the index goes after 16 picks since it was built.
	for i := range 17 {
		if !lc.watching.Load() {
			if i < 16-8 {
				t.Fatalf("let go after %d picks, before twice the endpoints", 8+i)
			}
			return
		}
		pk, err := p.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		pk.Release()
	}
	t.Fatal("all idle for 16 picks and the index is still kept")
}
