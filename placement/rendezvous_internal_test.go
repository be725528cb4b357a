package placement

import (
	"strconv"
	"testing"
)

// Rendezvous's fast loop ranks as score does: against every node's score
// for many keys, and on a tie of the bits it compares (equal seeds), by
// name.
func TestRendezvousFastLoopRanksAsScore(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 17, 100} {
		var nodes []Node
		for i := range n {
			nodes = append(nodes, Node{Name: "n" + strconv.Itoa(i)})
		}
		r, err := NewRendezvous(nodes)
		if err != nil {
			t.Fatal(err)
		}
		s := r.snap.Load()
		for _, k := range Keys(2000) {
			kh := XXHash.Sum(k)
			want := 0
			for i := 1; i < n; i++ {
				if s.better(s.score(kh, i), i, s.score(kh, want), want) {
					want = i
				}
			}
			if got := s.uniformOwner(kh); got != want {
				t.Fatalf("n=%d %s: fast loop %d, score %d", n, k, got, want)
			}
		}
	}
	tie := &hrwSnap{nodes: []Node{{Name: "c"}, {Name: "b"}, {Name: "d"}, {Name: "e"}, {Name: "a"}, {Name: "f"}}, seeds: []uint64{7, 7, 7, 7, 7, 7}, pre: []uint64{7, 7, 7, 7, 7, 7}, uniform: true}
	for _, kh := range []uint64{0, 1, 42, 1 << 63} {
		if got := tie.uniformOwner(kh); tie.nodes[got].Name != "a" {
			t.Fatalf("a tie went to %s, want a (by name)", tie.nodes[got].Name)
		}
	}
}
