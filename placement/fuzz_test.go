package placement_test

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rotor-lb/rotor/placement"
)

// FuzzRingMembership applies a random sequence of adds, removes and weight
// changes to a ring and checks, after each, that it answers exactly as a
// ring built from scratch over the same set, and that replicas stay
// distinct.
func FuzzRingMembership(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0x81, 4, 0x82, 5})
	f.Add([]byte{7, 7, 7, 0x87, 0x87, 0x47})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		opts := placement.RingOptions{VNodes: 8}
		r, err := placement.NewRing(nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		var set []placement.Node
		keys := placement.Keys(64)
		for _, op := range ops {
			name := "n" + strconv.Itoa(int(op&0x0f))
			weight := int(op>>4&0x3) + 1
			idx := -1
			for i, n := range set {
				if n.Name == name {
					idx = i
				}
			}
			switch {
			case op&0x80 != 0 && idx >= 0:
				if err := r.Remove(name); err != nil {
					t.Fatalf("remove %s: %v", name, err)
				}
				set = append(set[:idx:idx], set[idx+1:]...)
			case idx < 0:
				n := placement.Node{Name: name, Weight: weight}
				if err := r.Add(n); err != nil {
					t.Fatalf("add %s: %v", name, err)
				}
				set = append(set, n)
			default:
				if err := r.Add(placement.Node{Name: name}); err == nil {
					t.Fatalf("duplicate add of %s accepted", name)
				}
			}
			fresh, err := placement.NewRing(set, opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.Points() != fresh.Points() {
				t.Fatalf("points %d, fresh %d", r.Points(), fresh.Points())
			}
			for _, k := range keys {
				got, gerr := placement.Owners(r, k, 3)
				want, werr := placement.Owners(fresh, k, 3)
				if (gerr == nil) != (werr == nil) || !cmp.Equal(got, want) {
					t.Fatalf("key %s: incremental %v (%v), fresh %v (%v)", k, got, gerr, want, werr)
				}
				for i := range got {
					for j := range i {
						if got[i] == got[j] {
							t.Fatalf("key %s: replicas %v repeat", k, got)
						}
					}
				}
			}
		}
	})
}
