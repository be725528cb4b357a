package placement

import (
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A ring laid out by hand so every answer can be checked with a pencil:
//
//	point:  a#0  b#0  c#0  a#1  b#1
//	hash:   10   20   30   40   40
//
// b#1 and a#1 collide at 40; the tie goes to the smaller name, so a#1 comes
// first. A key at 15 goes to b (first point > 15); a key at 20 is not taken
// by b#0 (strictly greater), so c; 40 passes both points at 40 and wraps to
// a#0; 5 lands on a#0.
func handRing() *ringSnap {
	nodes := []Node{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}
	pts := []ringPoint{{10, 0, 0}, {20, 1, 0}, {30, 2, 0}, {40, 1, 1}, {40, 0, 1}}
	r := &Ring{}
	return newRingSnap(nodes, r.sortPoints(nodes, pts), 64)
}

func TestRingHandLaidOut(t *testing.T) {
	s := handRing()
	if got, want := []string{s.pointName(3), s.pointName(4)}, []string{"a#1", "b#1"}; !cmp.Equal(got, want) {
		t.Fatalf("equal hashes not broken by name: (-got +want)\n%s", cmp.Diff(got, want))
	}
	r := &Ring{}
	r.snap.Store(s)
	tests := []struct {
		name string
		hash uint64
		r    int
		want []string
	}{
		{"before the first point", 5, 1, []string{"a"}},
		{"between points", 15, 1, []string{"b"}},
		{"on a point goes past it", 20, 1, []string{"c"}},
		{"past the last point wraps", 40, 1, []string{"a"}},
		{"far past wraps", ^uint64(0), 1, []string{"a"}},
		{"replicas skip a taken node", 35, 2, []string{"a", "b"}},
		{"replicas wrap", 30, 3, []string{"a", "b", "c"}},
		{"replicas capped at node count", 0, 9, []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := s.search(tt.hash)
			var got []string
			for len(got) < min(tt.r, 3) {
				if name := s.nodes[s.owners[i]].Name; !slices.Contains(got, name) {
					got = append(got, name)
				}
				i = (i + 1) % len(s.hashes)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("hash %d (-got +want)\n%s", tt.hash, diff)
			}
		})
	}
}

// The bucket index only narrows the binary search: it must find exactly
// the point a search over the whole array finds.
func TestRingIndexedSearch(t *testing.T) {
	for _, hash := range []Hash{XXHash, MD5} {
		for _, n := range []int{1, 2, 7, 300} {
			nodes := make([]Node, n)
			for i := range nodes {
				nodes[i] = Node{Name: "n" + strconv.Itoa(i)}
			}
			r, err := NewRing(nodes, RingOptions{VNodes: 13, Hash: hash})
			if err != nil {
				t.Fatal(err)
			}
			s := r.snap.Load()
			x := uint64(88172645463325252)
			probes := append([]uint64{0, 1, ^uint64(0)}, s.hashes...)
			for range 20000 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				probes = append(probes, x>>(64-hash.bits()))
			}
			for _, p := range s.hashes {
				probes = append(probes, p-1, p+1)
			}
			for _, h := range probes {
				want := sort.Search(len(s.hashes), func(i int) bool { return s.hashes[i] > h }) % len(s.hashes)
				if h>>(hash.bits()-1)>>1 != 0 {
					continue // beyond the hash's range: cannot occur
				}
				if got := s.search(h); got != want {
					t.Fatalf("%v n=%d: search(%d) = %d, want %d", hash, n, h, got, want)
				}
			}
		}
	}
}
