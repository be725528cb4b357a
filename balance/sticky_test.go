package balance_test

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/placement"
)

func pickKey(t *testing.T, p *balance.Pool, key string) balance.Pick {
	t.Helper()
	pk, err := p.Pick(balance.Request{Key: key})
	if err != nil {
		t.Fatalf("key %s: %v", key, err)
	}
	return pk
}

// pinKeys picks keys user0..user(n-1) once each and returns where each
// went.
func pinKeys(t *testing.T, p *balance.Pool, n int) map[string]string {
	t.Helper()
	home := map[string]string{}
	for i := range n {
		k := "user" + strconv.Itoa(i)
		pk := pickKey(t, p, k)
		home[k] = pk.Endpoint.Name
		pk.Done(health.Outcome{Status: 200})
	}
	return home
}

func TestStickyTable(t *testing.T) {
	st, _ := balance.NewSticky(balance.StickyOptions{TTL: time.Minute, Inner: &balance.RoundRobin{}})
	p, clock := testPool(t, st, "a", "b", "c")
	home := pinKeys(t, p, 30)
	for round := range 3 {
		for k, want := range home {
			pk := pickKey(t, p, k)
			if pk.Endpoint.Name != want {
				t.Fatalf("round %d: %s went to %s, pinned to %s", round, k, pk.Endpoint.Name, want)
			}
			pk.Done(health.Outcome{Status: 200})
		}
	}
	s := st.Stats()
	if s.Pinned != 30 || s.Hits != 90 || s.Entries != 30 {
		t.Fatalf("stats %+v, want 30 pinned, 90 hits", s)
	}

	// b leaves (drained): its keys are pinned again elsewhere, and stay there.
	state(p, "b").SetDraining(true)
	moved := 0
	for k, was := range home {
		pk := pickKey(t, p, k)
		if pk.Endpoint.Name == "b" {
			t.Fatalf("%s went to draining b", k)
		}
		if was == "b" {
			moved++
			home[k] = pk.Endpoint.Name
		} else if pk.Endpoint.Name != was {
			t.Fatalf("%s moved from %s though its endpoint stayed", k, was)
		}
		pk.Done(health.Outcome{Status: 200})
	}
	state(p, "b").SetDraining(false)
	for k, want := range home {
		if pk := pickKey(t, p, k); pk.Endpoint.Name != want {
			t.Fatalf("%s repinned to %s went back to %s when b returned", k, want, pk.Endpoint.Name)
		}
	}
	if got := st.Stats().Repinned; got != int64(moved) || moved == 0 {
		t.Fatalf("repinned %d, want %d", got, moved)
	}

	// Pins expire after the TTL without use.
	clock.Advance(2 * time.Minute)
	pickKey(t, p, "user0")
	if got := st.Stats().Pinned; got != 31 {
		t.Fatalf("after the TTL user0 should be pinned afresh: pinned %d", got)
	}
}

// The table outlives reloads: a pin names its endpoint, wherever the new
// set puts it, and a pin whose endpoint left is made again elsewhere.
func TestStickyTableAcrossReloads(t *testing.T) {
	st, _ := balance.NewSticky(balance.StickyOptions{TTL: time.Minute, Inner: &balance.RoundRobin{}})
	p, _ := testPool(t, st, "a", "b", "c")
	home := pinKeys(t, p, 30)
	reload := func(names ...string) {
		t.Helper()
		if err := p.Configure(balance.Config{Policy: st, Endpoints: endpointConfigs(names)}); err != nil {
			t.Fatal(err)
		}
	}
	// The same endpoints in another order, and one more in front.
	reload("d", "c", "b", "a")
	for k, want := range home {
		if pk := pickKey(t, p, k); pk.Endpoint.Name != want {
			t.Fatalf("after a reload that moved every endpoint: %s went to %s, pinned to %s", k, pk.Endpoint.Name, want)
		}
	}
	// b leaves: its keys go elsewhere and stay; the others stay put.
	reload("a", "d", "c")
	for k, was := range home {
		pk := pickKey(t, p, k)
		switch {
		case pk.Endpoint.Name == "b":
			t.Fatalf("%s went to b, which left", k)
		case was != "b" && pk.Endpoint.Name != was:
			t.Fatalf("%s moved from %s, which stayed, to %s", k, was, pk.Endpoint.Name)
		}
		home[k] = pk.Endpoint.Name
	}
	// Back to the first order: every key where it was last pinned.
	reload("a", "b", "c", "d")
	for k, want := range home {
		if pk := pickKey(t, p, k); pk.Endpoint.Name != want {
			t.Fatalf("after the last reload: %s went to %s, pinned to %s", k, pk.Endpoint.Name, want)
		}
	}
}

// bounded cannot be sticky's inner policy: it would be told of the end
// of requests it never placed.
func TestStickyRefusesBoundedInner(t *testing.T) {
	in, err := balance.NewKeyed("bounded", balance.KeyedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, hash := range []bool{false, true} {
		_, err := balance.NewSticky(balance.StickyOptions{Hash: hash, Inner: in})
		if err == nil || !strings.HasPrefix(err.Error(), "inner: bounded") {
			t.Fatalf("hash %v: err = %v, want an error naming inner and bounded", hash, err)
		}
	}
	for _, algo := range []string{"ring", "rendezvous", "maglev"} {
		in, err := balance.NewKeyed(algo, balance.KeyedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := balance.NewSticky(balance.StickyOptions{Inner: in}); err != nil {
			t.Fatalf("inner %s: %v", algo, err)
		}
	}
}

// A pick dated by its caller (Request.At) is weighed at that time, not
// the clock's: here a pin expires by the request's date alone.
func TestStickyTableDatedPick(t *testing.T) {
	st, _ := balance.NewSticky(balance.StickyOptions{TTL: time.Minute, Inner: &balance.RoundRobin{}})
	p, clock := testPool(t, st, "a", "b", "c")
	pick := func(at time.Time) {
		r := balance.Request{Key: "k"}
		if !at.IsZero() {
			r.At = at.UnixNano()
		}
		pk, err := p.Pick(r)
		if err != nil {
			t.Fatal(err)
		}
		pk.Done(health.Outcome{Status: 200})
	}
	pick(time.Time{})
	pick(clock.Now().Add(30 * time.Second)) // within the TTL: kept, until 1m30s
	if s := st.Stats(); s.Pinned != 1 || s.Hits != 1 {
		t.Fatalf("stats %+v, want 1 pinned, 1 hit", s)
	}
	pick(clock.Now().Add(2 * time.Minute)) // the clock has not moved
	if s := st.Stats(); s.Pinned != 2 {
		t.Fatalf("a pick dated past the TTL: stats %+v, want the key pinned afresh", s)
	}
}

func TestStickyFull(t *testing.T) {
	for _, onFull := range []balance.OnFull{balance.BreakAffinity, balance.Reject} {
		st, _ := balance.NewSticky(balance.StickyOptions{OnFull: onFull})
		p, _ := testPool(t, st, "a", "b")
		first := pickKey(t, p, "k")
		home := first.Endpoint.Name
		// Cap home at one request: full while first is in flight.
		eps := []balance.EndpointConfig{{Name: "a"}, {Name: "b"}}
		for i := range eps {
			if eps[i].Name == home {
				eps[i].MaxInflight = 1
			}
		}
		if err := p.Configure(balance.Config{Policy: st, Endpoints: eps}); err != nil {
			t.Fatal(err)
		}
		pk, err := p.Pick(balance.Request{Key: "k"})
		switch onFull {
		case balance.Reject:
			if !errors.Is(err, balance.ErrRejected) || st.Stats().Rejected != 1 || p.Stats().Rejected != 1 {
				t.Fatalf("reject: err %v, stats %+v", err, st.Stats())
			}
		case balance.BreakAffinity:
			if err != nil || pk.Endpoint.Name == home || st.Stats().Broken != 1 {
				t.Fatalf("break: went to %v (home %s), err %v, stats %+v", pk.Endpoint, home, err, st.Stats())
			}
			pk.Done(health.Outcome{Status: 200})
		}
		first.Done(health.Outcome{Status: 200})
		// No longer full: the key is home again, its pin kept.
		if again := pickKey(t, p, "k"); again.Endpoint.Name != home {
			t.Fatalf("after the endpoint emptied, k went to %s, not home %s", again.Endpoint.Name, home)
		}
	}
}

// Hash mode: no table; a leaving endpoint moves only its own keys.
func TestStickyHash(t *testing.T) {
	st, _ := balance.NewSticky(balance.StickyOptions{Hash: true})
	p, _ := testPool(t, st, letters(5)...)
	hrw, _ := placement.NewRendezvous([]placement.Node{{Name: "e0"}, {Name: "e1"}, {Name: "e2"}, {Name: "e3"}, {Name: "e4"}})
	before := map[string]string{}
	for i := range 500 {
		k := "s" + strconv.Itoa(i)
		pk := pickKey(t, p, k)
		want, _ := hrw.Owner(k)
		if pk.Endpoint.Name != want {
			t.Fatalf("%s went to %s, rendezvous owner %s", k, pk.Endpoint.Name, want)
		}
		before[k] = want
		pk.Done(health.Outcome{Status: 200})
	}
	openBreaker(t, p, "e3")
	for k, was := range before {
		pk := pickKey(t, p, k)
		switch {
		case was == "e3" && pk.Endpoint.Name == "e3":
			t.Fatalf("%s still on open e3", k)
		case was != "e3" && pk.Endpoint.Name != was:
			t.Fatalf("%s moved %s -> %s though its endpoint is fine", k, was, pk.Endpoint.Name)
		case was == "e3":
			owners, _ := placement.Owners(hrw, k, 2)
			if pk.Endpoint.Name != owners[1] {
				t.Fatalf("%s went to %s, rendezvous runner-up is %s", k, pk.Endpoint.Name, owners[1])
			}
		}
		pk.Done(health.Outcome{Status: 200})
	}
	if st.Stats().Entries != 0 {
		t.Fatal("hash mode kept a table")
	}
}

func TestKeyedRingWalksPastUnavailable(t *testing.T) {
	pol, err := balance.NewKeyed("ring", balance.KeyedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := testPool(t, pol, letters(6)...)
	ring, _ := placement.NewRing([]placement.Node{{Name: "e0"}, {Name: "e1"}, {Name: "e2"}, {Name: "e3"}, {Name: "e4"}, {Name: "e5"}}, placement.RingOptions{})
	state(p, "e2").SetDown(true, t0)
	for i := range 400 {
		k := "k" + strconv.Itoa(i)
		owners, _ := placement.Owners(ring, k, 2)
		want := owners[0]
		if want == "e2" {
			want = owners[1] // next distinct clockwise
		}
		if pk := pickKey(t, p, k); pk.Endpoint.Name != want {
			t.Fatalf("%s went to %s, want %s (ring owners %v)", k, pk.Endpoint.Name, want, owners)
		}
	}
	if _, err := balance.NewKeyed("p3c", balance.KeyedOptions{}); err == nil {
		t.Fatal("unknown placer accepted")
	}
}

func TestKeyedEveryPlacerIsStable(t *testing.T) {
	for _, algo := range balance.KeyedAlgorithms {
		pol, err := balance.NewKeyed(algo, balance.KeyedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := testPool(t, pol, letters(4)...)
		for i := range 50 {
			k := "k" + strconv.Itoa(i)
			a := pickKey(t, p, k)
			a.Done(health.Outcome{Status: 200})
			b := pickKey(t, p, k)
			b.Done(health.Outcome{Status: 200})
			if a.Endpoint != b.Endpoint {
				t.Fatalf("%s: %s went to %s then %s", algo, k, a.Endpoint.Name, b.Endpoint.Name)
			}
		}
		// No key: still picks something available.
		pk, err := p.Pick(balance.Request{})
		if err != nil {
			t.Fatalf("%s with no key: %v", algo, err)
		}
		pk.Done(health.Outcome{Status: 200})
	}
}

// Bounded: one hot key held in flight spreads at the bound, and Done gives
// the units back.
func TestKeyedBoundedSpreadsHotKey(t *testing.T) {
	pol, _ := balance.NewKeyed("bounded", balance.KeyedOptions{Epsilon: 0.25})
	p, _ := testPool(t, pol, letters(4)...)
	var held []balance.Pick
	for range 100 {
		held = append(held, pickKey(t, p, "hot"))
	}
	for _, ep := range p.Snapshot().Endpoints() {
		if n := ep.State.Inflight(); n > 32 {
			t.Fatalf("%s holds %d of 100, bound ceil(1.25*100/4) = 32", ep.Name, n)
		}
	}
	for _, pk := range held {
		pk.Done(health.Outcome{Status: 200})
	}
	// All units back: the hot key goes to its ring owner again.
	ring, _ := placement.NewRing([]placement.Node{{Name: "e0"}, {Name: "e1"}, {Name: "e2"}, {Name: "e3"}}, placement.RingOptions{})
	owner, _ := ring.Owner("hot")
	if first := pickKey(t, p, "hot"); first.Endpoint.Name != owner {
		t.Fatalf("with the units released, hot went to %s, not its ring owner %s", first.Endpoint.Name, owner)
	}
}

// A key whose first owners are down goes to the first one up, however far
// down the placer's order that is (past the few owners asked for first),
// for every placer that walks its order.
func TestKeyedWalksToFirstAvailableOwner(t *testing.T) {
	const n = 40
	names := letters(n)
	nodes := make([]placement.Node, n)
	for i, name := range names {
		nodes[i] = placement.Node{Name: name, Weight: 1 + i%3}
		names[i] = name + "=" + strconv.Itoa(1+i%3)
	}
	for _, algo := range []string{"ring", "rendezvous", "maglev"} {
		pol, err := balance.NewKeyed(algo, balance.KeyedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := testPool(t, pol, names...)
		var placer placement.Placer
		switch algo {
		case "ring":
			placer, err = placement.NewRing(nodes, placement.RingOptions{})
		case "rendezvous":
			placer, err = placement.NewRendezvous(nodes)
		case "maglev":
			placer, err = placement.NewMaglev(nodes, placement.MaglevOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range 12 {
			k := "k" + strconv.Itoa(i)
			owners, _ := placement.Owners(placer, k, n)
			for _, down := range []int{1, 2, 3, 5, 9, 17, n - 1} {
				for _, o := range owners[:down] {
					state(p, o).SetDown(true, t0)
				}
				pk := pickKey(t, p, k)
				if pk.Endpoint.Name != owners[down] {
					t.Fatalf("%s, %s with its first %d owners down: went to %s, want %s", algo, k, down, pk.Endpoint.Name, owners[down])
				}
				pk.Done(health.Outcome{Status: 200})
				for _, o := range owners[:down] {
					state(p, o).SetDown(false, t0)
				}
			}
		}
	}
}

// countingPolicy's picker takes the first endpoint and counts the ends of
// the requests it is told of.
type countingPolicy struct{ done atomic.Int64 }

func (*countingPolicy) Name() string { return "counting" }
func (c *countingPolicy) Build(s *balance.Set) balance.Picker {
	return countingPicker{c, s}
}

type countingPicker struct {
	c *countingPolicy
	s *balance.Set
}

func (p countingPicker) Pick(balance.Request) (*balance.Endpoint, error) {
	return p.s.Endpoints()[0], nil
}
func (p countingPicker) Done(*balance.Endpoint) { p.c.done.Add(1) }

// The end of every request a sticky policy places, by its table or by its
// inner policy, reaches an inner policy that keeps accounts; over one
// that keeps none (least_conn's index is kept by the endpoints' states)
// the sticky picker is no Observer and the pool calls nothing.
func TestStickyTellsInnerObserver(t *testing.T) {
	inner := &countingPolicy{}
	st, _ := balance.NewSticky(balance.StickyOptions{Inner: inner})
	p, _ := testPool(t, st, "a", "b")
	for i := range 10 {
		pk := pickKey(t, p, "user"+strconv.Itoa(i%3))
		pk.Done(health.Outcome{Status: 200})
	}
	if got := inner.done.Load(); got != 10 {
		t.Fatalf("inner told of %d ends, want 10 (3 placed, 7 hits)", got)
	}
	set := balance.NewSet([]*balance.Endpoint{{Name: "a", State: health.NewState("a")}}, health.SystemClock{}, balance.FastRand{})
	lc, _ := balance.NewSticky(balance.StickyOptions{})
	if _, ok := lc.Build(set).(balance.Observer); ok {
		t.Fatal("sticky over least_conn is an Observer: the pool would call it at every end for nothing")
	}
}
