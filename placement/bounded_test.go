package placement_test

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rotor-lb/rotor/placement"
)

// One hot key acquired over and over is spread so that no node passes
// ceil((1+eps) * total / N), where a plain ring would put it all on one.
func TestBoundedCapsAHotKey(t *testing.T) {
	const n, units = 5, 1000
	b, err := placement.NewBounded(nodes(letters(n)...), placement.BoundedOptions{Epsilon: 0.1})
	must(t, err)
	ringOwner, _ := b.Owner("hot")
	for range units {
		if _, err := b.Acquire("hot"); err != nil {
			t.Fatal(err)
		}
	}
	bound := int64(math.Ceil(1.1 * units / n))
	for _, nd := range b.Nodes() {
		if l := b.Load(nd.Name); l > bound {
			t.Errorf("node %s holds %d units, bound %d", nd.Name, l, bound)
		}
	}
	if l := b.Load(ringOwner); l < bound-1 {
		t.Errorf("the ring owner %s holds %d units: it should fill to the bound %d first", ringOwner, l, bound)
	}
	if b.Total() != units {
		t.Errorf("total %d, want %d", b.Total(), units)
	}
}

// With room everywhere a key goes to its ring owner, exactly as on a Ring.
func TestBoundedIsARingWhenLight(t *testing.T) {
	ns := nodes(letters(10)...)
	ring, _ := placement.NewRing(ns, placement.RingOptions{})
	b, _ := placement.NewBounded(ns, placement.BoundedOptions{Epsilon: 1000})
	for _, k := range placement.Keys(2000) {
		want, _ := ring.Owner(k)
		got, _ := b.Acquire(k)
		if got != want {
			t.Fatalf("key %s: bounded %s, ring %s", k, got, want)
		}
	}
}

func TestBoundedConcurrentAcquireRelease(t *testing.T) {
	b, _ := placement.NewBounded(nodes(letters(6)...), placement.BoundedOptions{Epsilon: 0.25})
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	held := make([][]string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name, err := b.Acquire("k" + strconv.Itoa(i%37))
				if err != nil {
					t.Error(err)
					return
				}
				held[w] = append(held[w], name)
			}
		}()
	}
	wg.Wait()
	var sum int64
	for _, nd := range b.Nodes() {
		sum += b.Load(nd.Name)
	}
	if sum != workers*each || b.Total() != workers*each {
		t.Fatalf("after acquires: loads sum to %d, total %d, want %d", sum, b.Total(), workers*each)
	}
	bound := int64(math.Ceil(1.25 * workers * each / 6))
	for _, nd := range b.Nodes() {
		// Racing acquirers each saw a total no larger than the final one,
		// so the final bound holds for every node.
		if l := b.Load(nd.Name); l > bound {
			t.Errorf("node %s: %d units over bound %d", nd.Name, l, bound)
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, name := range held[w] {
				if !b.Release(name) {
					t.Errorf("release of %s refused", name)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Total() != 0 {
		t.Fatalf("after releases: total %d", b.Total())
	}
	if b.Release("n0") {
		t.Error("release on a node holding nothing succeeded")
	}
}

func TestBoundedRemovedNodeUnitsLeave(t *testing.T) {
	b, _ := placement.NewBounded(nodes("a", "b", "c"), placement.BoundedOptions{})
	var onA int64
	for _, k := range placement.Keys(300) {
		if n, _ := b.Acquire(k); n == "a" {
			onA++
		}
	}
	must(t, b.Remove("a"))
	if got := b.Total(); got != 300-onA {
		t.Errorf("total after removing a: %d, want %d", got, 300-onA)
	}
	if b.Release("a") {
		t.Error("release on a removed node succeeded")
	}
	must(t, b.Add(placement.Node{Name: "a"}))
	if b.Load("a") != 0 {
		t.Errorf("a returned with load %d", b.Load("a"))
	}
}

// The explanation walks past full nodes, and names the node Acquire would
// use next.
func TestBoundedExplainShowsFullNodes(t *testing.T) {
	b, _ := placement.NewBounded(nodes(letters(4)...), placement.BoundedOptions{Epsilon: 0.1})
	ring, _ := placement.NewRing(nodes(letters(4)...), placement.RingOptions{})
	owner, _ := ring.Owner("hot")
	var spilled []string
	for range 40 {
		if n, _ := b.Acquire("hot"); n != owner {
			spilled = append(spilled, n)
		}
	}
	// Those that spilled finish: the owner now holds far more than the
	// average, and is full.
	for _, n := range spilled {
		b.Release(n)
	}
	e, err := b.Explain("hot", 1)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := b.Owner("hot")
	if len(e.Owners) != 1 || e.Owners[0] != want {
		t.Fatalf("explained %v, Owner says %s", e.Owners, want)
	}
	full := 0
	for _, s := range e.Steps {
		if strings.HasPrefix(s.Note, "full") {
			full++
		}
	}
	if full == 0 {
		t.Fatalf("no full node in the walk of a hot key:\n%+v", e.Steps)
	}
}

// A placer derived with WithNodes shares the loads of the one it came
// from, and building it changes nothing in the original: a balancer can
// build its next membership aside and abandon it.
func TestBoundedWithNodesSharesLoadsAndLeavesTheOriginal(t *testing.T) {
	b, err := placement.NewBounded(nodes("a", "b", "c"), placement.BoundedOptions{})
	must(t, err)
	for range 30 {
		if _, err := b.Acquire("k"); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]int64{"a": b.Load("a"), "b": b.Load("b"), "c": b.Load("c")}
	d, err := b.WithNodes(nodes("a", "b", "d")) // c leaves, d joins
	must(t, err)
	if got := b.Nodes(); len(got) != 3 || got[2].Name != "c" {
		t.Fatalf("the original's nodes changed: %v", got)
	}
	for name, l := range before {
		if b.Load(name) != l {
			t.Fatalf("the original's load of %s changed from %d to %d", name, l, b.Load(name))
		}
	}
	if d.Load("a") != before["a"] || d.Load("b") != before["b"] || d.Load("d") != 0 {
		t.Fatalf("derived loads a=%d b=%d d=%d, want %d %d 0", d.Load("a"), d.Load("b"), d.Load("d"), before["a"], before["b"])
	}
	// A unit acquired through one is released through the other.
	name, err := d.Acquire("k2")
	must(t, err)
	if !b.Release(name) {
		t.Fatalf("a unit acquired on %s through the derived placer was not released through the original", name)
	}
	if b.Total() != 30 || d.Total() != 30 {
		t.Fatalf("totals %d and %d, want both 30", b.Total(), d.Total())
	}
}

// AcquireIndex and ReleaseIndex are AcquireFunc and Release by position:
// the same keys, acceptances and releases on two placers, one by name and
// one by position, choose the same nodes and leave the same loads; a
// position that is not a node releases nothing.
func TestBoundedByIndexIsByName(t *testing.T) {
	ns := nodes(letters(7)...)
	byName, _ := placement.NewBounded(ns, placement.BoundedOptions{Epsilon: 0.2})
	byIndex, _ := placement.NewBounded(ns, placement.BoundedOptions{Epsilon: 0.2})
	order := byIndex.Nodes()
	down := func(name string) bool { return name == "c" || name == "f" }
	var held []int
	for i, k := range placement.Keys(3000) {
		want, err := byName.AcquireFunc(k, func(name string) bool { return !down(name) })
		must(t, err)
		j, err := byIndex.AcquireIndex(k, func(j int) bool { return !down(order[j].Name) })
		must(t, err)
		if order[j].Name != want {
			t.Fatalf("key %s: by position %s, by name %s", k, order[j].Name, want)
		}
		held = append(held, j)
		if i%3 == 2 { // give back the oldest held, both ways
			byName.Release(order[held[0]].Name)
			if !byIndex.ReleaseIndex(held[0]) {
				t.Fatalf("ReleaseIndex(%d) of a unit held: false", held[0])
			}
			held = held[1:]
		}
	}
	for _, n := range order {
		if a, b := byName.Load(n.Name), byIndex.Load(n.Name); a != b {
			t.Errorf("node %s holds %d by name, %d by position", n.Name, a, b)
		}
	}
	if byName.Total() != byIndex.Total() {
		t.Errorf("total %d by name, %d by position", byName.Total(), byIndex.Total())
	}
	for _, i := range []int{-1, len(order)} {
		if byIndex.ReleaseIndex(i) {
			t.Errorf("ReleaseIndex(%d), no such node: true", i)
		}
	}
}
