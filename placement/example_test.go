package placement_test

import (
	"fmt"
	"os"

	"github.com/rotor-lb/rotor/placement"
)

func ExampleRing() {
	ring, err := placement.NewRing([]placement.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		placement.RingOptions{VNodes: 100, Hash: placement.MD5})
	if err != nil {
		panic(err)
	}
	owner, _ := ring.Owner("user:42")
	replicas, _ := placement.Owners(ring, "user:42", 2)
	fmt.Println(owner, replicas)
	// Output: b [b a]
}

func ExampleRing_Add() {
	ring, _ := placement.NewRing([]placement.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}}, placement.RingOptions{})
	before, _ := placement.Assign(ring, placement.Keys(10000))
	_ = ring.Add(placement.Node{Name: "d"})
	after, _ := placement.Assign(ring, placement.Keys(10000))
	movedToD, movedElsewhere := 0, 0
	for i := range before {
		switch {
		case before[i] == after[i]:
		case after[i] == "d":
			movedToD++
		default:
			movedElsewhere++
		}
	}
	// The ideal is 1/4; with 100 points per node d's arcs cover a bit less.
	fmt.Printf("moved %.2f of keys to d, %d elsewhere\n", float64(movedToD)/10000, movedElsewhere)
	// Output: moved 0.18 of keys to d, 0 elsewhere
}

func ExampleRendezvous() {
	hrw, _ := placement.NewRendezvous([]placement.Node{{Name: "a"}, {Name: "b", Weight: 3}})
	owners, _ := placement.Assign(hrw, placement.Keys(40000))
	onB := 0
	for _, o := range owners {
		if o == "b" {
			onB++
		}
	}
	fmt.Printf("b (weight 3 of 4) owns %.2f of keys\n", float64(onB)/40000)
	// Output: b (weight 3 of 4) owns 0.75 of keys
}

func ExampleJumpHash() {
	// Keys keep their bucket as buckets are added, unless the new bucket
	// takes them.
	fmt.Println(placement.JumpHash(1234567890, 10), placement.JumpHash(1234567890, 11), placement.JumpHash(1234567890, 1000))
	// Output: 4 4 499
}

func ExampleMaglev() {
	m, _ := placement.NewMaglev([]placement.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}}, placement.MaglevOptions{TableSize: 65537})
	owner, _ := m.Owner("user:42")
	fmt.Println(owner)
	// Output: c
}

func ExampleBounded() {
	b, _ := placement.NewBounded([]placement.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}},
		placement.BoundedOptions{Epsilon: 0.25})
	// One hot key, 100 concurrent uses: a plain ring would send them all to
	// one node; bounded load caps each node at ceil(1.25 * total / 4),
	// 32 once all 100 are placed, so the hot key spills clockwise.
	for range 100 {
		_, _ = b.Acquire("hot")
	}
	fmt.Println(b.Load("a"), b.Load("b"), b.Load("c"), b.Load("d"))
	// Output: 31 31 32 6
}

func ExampleRing_Explain() {
	ring, _ := placement.NewRing([]placement.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		placement.RingOptions{VNodes: 1, Hash: placement.MD5})
	e, _ := ring.Explain("user:42", 2)
	_, _ = e.WriteTo(os.Stdout)
	// Output:
	// key "user:42" (md5)  hash 1457184536
	//   b#0            0509158149           node b          last point at or before the key (not the owner)
	//   a#0            3627721093           node a          owner
	//   past the last point: wrap around to the first
	//   c#0            0233601555           node c          replica 2
	// owners: [a c]
}
