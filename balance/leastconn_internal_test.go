package balance

import (
	"cmp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/health"
)

// A least_conn or weighted_least_conn index stops when its snapshot is
// replaced, also when it serves inside sticky: its watches are cleared (a
// picker built later holds them) and a pick that still reaches it scans.
func TestLeastConnIndexRetires(t *testing.T) {
	var pols []Policy
	for _, inner := range []Policy{LeastConn{}, WeightedLeastConn{}} {
		sticky, err := NewSticky(StickyOptions{Inner: inner})
		if err != nil {
			t.Fatal(err)
		}
		pols = append(pols, inner, sticky)
	}
	for _, pol := range pols {
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
		if lc.scan || placed(lc) == nil {
			t.Fatalf("%s: the index did not start at the first pick with no endpoint idle", pol.Name())
		}
		if err := p.Configure(Config{Policy: pol, Endpoints: eps[:2]}); err != nil {
			t.Fatal(err)
		}
		if !lc.scan {
			t.Fatalf("%s: the replaced snapshot's index still runs", pol.Name())
		}
		// Requests on the new snapshot move nothing in the old index.
		levels := placed(lc)
		var held []Pick
		for range 4 {
			pk, err := p.Pick(Request{})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, pk)
		}
		if now := placed(lc); !slices.Equal(levels, now) {
			t.Fatalf("%s: the replaced index still follows the states: %v -> %v", pol.Name(), levels, now)
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

func indexOf(t *testing.T, p Picker) *loadIndex {
	t.Helper()
	switch p := p.(type) {
	case *lcPicker:
		return &p.loadIndex
	case *wlcPicker:
		return &p.loadIndex
	case *stickyPicker:
		return indexOf(t, p.inner)
	}
	t.Fatalf("no least_conn index in %T", p)
	return nil
}

// placed is where the index has each endpoint: the in-flight count it
// read last (-1 when out), or nil before it was first built.
func placed(x *loadIndex) []int64 {
	var out []int64
	switch o := x.order.(type) {
	case *lcBuckets:
		for _, l := range o.level {
			out = append(out, int64(l))
		}
	case *wlcHeap:
		for i, l := range o.load {
			if o.pos[i] < 0 {
				l = 0
			}
			out = append(out, l-1)
		}
	}
	return out
}

// A least_conn or weighted_least_conn index asked seldom (sticky's, for keys it has not seen)
// lets its watches go after idleMoves moves without a pick; then picks
// draw idle endpoints without it, and the first that finds none builds
// it again from the counts then.
func TestLeastConnIndexSleepsWhenIdle(t *testing.T) {
	for _, pol := range []Policy{LeastConn{}, WeightedLeastConn{}} {
		t.Run(pol.Name(), func(t *testing.T) { testIndexSleepsWhenIdle(t, pol) })
	}
}

func testIndexSleepsWhenIdle(t *testing.T, pol Policy) {
	p := NewPool("test", Options{Clock: health.NewManualClock(time.Unix(0, 0)), Rand: NewSeededRand(1)})
	eps := []EndpointConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	if err := p.Configure(Config{Policy: pol, Endpoints: eps}); err != nil {
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
	was := placed(lc)[1]
	held := []health.Ticket{b.State.AdmitFallback(&cfg), b.State.AdmitFallback(&cfg)}
	if got := placed(lc)[1]; got != was {
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
	if !lc.watching.Load() || placed(lc)[1] != 2 {
		t.Fatalf("after a pick with none idle: watching %v, b in bucket %d; want watching, 2", lc.watching.Load(), placed(lc)[1])
	}
	pk.Release()
	for _, tk := range append(held, more...) {
		tk.Release()
	}
	if placed(lc)[1] != 0 {
		t.Fatalf("b released: bucket %d, want 0", placed(lc)[1])
	}
}

// While most endpoints are idle least_conn (and weighted_least_conn, its
// endpoints of one weight) draws one, without its index;
// when none is idle it builds the index; once three quarters are idle
// again, after twice as many picks as endpoints, it lets the index go.
func TestLeastConnDrawsWhileMostAreIdle(t *testing.T) {
	for _, pol := range []Policy{LeastConn{}, WeightedLeastConn{}} {
		t.Run(pol.Name(), func(t *testing.T) { testDrawsWhileMostAreIdle(t, pol) })
	}
}

func testDrawsWhileMostAreIdle(t *testing.T, pol Policy) {
	p := NewPool("test", Options{Clock: health.NewManualClock(time.Unix(0, 0)), Rand: NewSeededRand(3)})
	var eps []EndpointConfig
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		eps = append(eps, EndpointConfig{Name: n})
	}
	if err := p.Configure(Config{Policy: pol, Endpoints: eps}); err != nil {
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
	if lc.watching.Load() || placed(lc) != nil {
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

// weighted_least_conn's heap steps over unavailable endpoints at its top:
// with any number of the least loaded drained (fewer than the search's
// bound and more), its pick is the available endpoint with the least
// (in flight + 1) / weight, and none when all are drained.
func TestWeightedLeastConnStepsOverUnavailable(t *testing.T) {
	const n = 200
	rng := NewSeededRand(5)
	cfg := health.Config{}.Normalize()
	eps := make([]*Endpoint, n)
	var held []health.Ticket
	for i := range eps {
		eps[i] = &Endpoint{Name: "e" + strconv.Itoa(i), Weight: 1 + i%4, State: health.NewState("e" + strconv.Itoa(i))}
		for range intn(rng, 6) {
			held = append(held, eps[i].State.AdmitFallback(&cfg))
		}
	}
	defer func() {
		for _, tk := range held {
			tk.Release()
		}
	}()
	s := NewSet(eps, health.NewManualClock(time.Unix(0, 0)), rng)
	p := WeightedLeastConn{}.Build(s).(*wlcPicker)
	// The endpoints least loaded for their weight first, as a scan sees them.
	key := func(ep *Endpoint) float64 { return float64(ep.State.Inflight()+1) / float64(ep.Weight) }
	order := slices.Clone(eps)
	slices.SortStableFunc(order, func(a, b *Endpoint) int { return cmp.Compare(key(a), key(b)) })
	drained := 0
	for _, k := range []int{0, 1, 2, 7, wlcFrontier - 1, wlcFrontier, wlcFrontier + 1, 100, n - 1, n} {
		for ; drained < k; drained++ {
			order[drained].State.SetDraining(true)
		}
		ep, err := p.pick(true) // through the heap, as when no idle heavy one is drawn
		if k == n {
			if err != ErrNoEndpoint {
				t.Fatalf("all drained: got %v, %v; want ErrNoEndpoint", ep, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%d drained: %v", k, err)
		}
		if !p.watching.Load() {
			t.Fatalf("%d drained: the pick did not go through the heap", k)
		}
		if ep.State.Draining() || key(ep) != key(order[k]) {
			t.Fatalf("%d drained: picked %s (draining %v, load per weight %.3f); the least available is %.3f",
				k, ep.Name, ep.State.Draining(), key(ep), key(order[k]))
		}
	}
}

// weighted_least_conn's endpoints equally loaded for their weight take
// their turns (HAProxy's order), where least_conn draws among them.
func TestWeightedLeastConnTiesTakeTurns(t *testing.T) {
	p := NewPool("test", Options{Clock: health.NewManualClock(time.Unix(0, 0)), Rand: NewSeededRand(1)})
	eps := []EndpointConfig{{Name: "a", Weight: 2}, {Name: "b", Weight: 2}, {Name: "c", Weight: 2}, {Name: "d", Weight: 2}, {Name: "e", Weight: 1}}
	if err := p.Configure(Config{Policy: WeightedLeastConn{}, Endpoints: eps}); err != nil {
		t.Fatal(err)
	}
	busy := loadAll(p.Snapshot()) // none idle: every pick through the heap
	defer func() {
		for _, tk := range busy {
			tk.Release()
		}
	}()
	var got []string
	for range 12 {
		pk, err := p.Pick(Request{})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, pk.Endpoint.Name)
		pk.Release()
	}
	for i := 4; i < len(got); i++ {
		if got[i] != got[i-4] || got[i] == "e" {
			t.Fatalf("picks %v: want a, b, c and d in a fixed turn, never e", got)
		}
	}
}
