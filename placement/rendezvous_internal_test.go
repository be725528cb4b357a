package placement

import (
	"math"
	"slices"
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

// With weights, the loop that scores one node a weight picks what scoring
// every node picks: for many keys over sets of mixed weights, and on ties
// of the hash within a weight (equal seeds), where it scores the group
// node by node, and across weights.
func TestRendezvousWeightedLoopRanksAsScore(t *testing.T) {
	exact := func(s *hrwSnap, kh uint64) int {
		best := 0
		for i := 1; i < len(s.nodes); i++ {
			if s.better(s.score(kh, i), i, s.score(kh, best), best) {
				best = i
			}
		}
		return best
	}
	for _, n := range []int{2, 3, 5, 8, 17, 64, 100} {
		for _, spread := range []int{2, 3, 7, 1000} {
			s := weightedSnap(t, n, func(i int) int { return 1 + (i*7+3)%spread })
			if s.uniform {
				continue
			}
			for _, k := range Keys(3000) {
				kh := XXHash.Sum(k)
				if got, want := s.weightedOwner(kh), exact(s, kh); got != want {
					t.Fatalf("n=%d spread %d %s: weighted loop %s, score %s", n, spread, k, s.nodes[got].Name, s.nodes[want].Name)
				}
			}
		}
	}
	// Equal seeds: equal hashes within a weight, and across weights.
	r, err := NewRendezvous([]Node{{Name: "c", Weight: 2}, {Name: "b", Weight: 2}, {Name: "a", Weight: 1}, {Name: "d", Weight: 2}, {Name: "e", Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s := r.snap.Load()
	tie := *s
	tie.seeds = []uint64{7, 7, 7, 7, 7}
	tie.pre = []uint64{7, 7, 7, 7, 7}
	tie.groups = []hrwGroup{{weight: 2, nodes: []int{0, 1, 3}, pre: []uint64{7, 7, 7}}, {weight: 1, nodes: []int{2, 4}, pre: []uint64{7, 7}}}
	for _, kh := range []uint64{0, 1, 42, 1 << 63} {
		if got, want := tie.weightedOwner(kh), exact(&tie, kh); got != want || tie.nodes[got].Name != "b" {
			t.Fatalf("a tie went to %s (score: %s), want b: the heaviest, by name", tie.nodes[got].Name, tie.nodes[want].Name)
		}
	}
}

// Two nodes of one weight whose hashes differ by one in their last place
// can score alike (above u = 1/2, unitFloat's half rounds away and two
// neighbouring hashes share a u; elsewhere the log and the division
// round): the order is then by name, which the hash alone would get
// wrong. The weighted loop sees the scores may meet and scores that group
// node by node. Node hashes are set through mix64's inverse, so the case
// is built, not left to luck.
func TestRendezvousWeightedNearTie(t *testing.T) {
	inv := func(c uint64) uint64 { // c's inverse mod 2^64 (c odd), by Newton
		x := c
		for range 6 {
			x *= 2 - c*x
		}
		return x
	}
	c1, c2 := uint64(0xff51afd7ed558ccd), uint64(0xc4ceb9fe1a85ec53)
	unmix := func(h uint64) uint64 { // y with mixPre(y) == h
		z := h ^ h>>33
		w := z * inv(c2)
		v := w ^ w>>33
		return v * inv(c1)
	}
	score := func(h53 uint64) float64 { return 2 / -math.Log((float64(h53)+0.5)/(1<<53)) }
	var hi uint64
	from := uint64(1) << 52 // u = 1/2
	for h := from; h < from+1_000_000; h++ {
		if score(h) == score(h-1) {
			hi = h
			break
		}
	}
	if hi == 0 {
		t.Fatal("no two neighbouring hashes score alike above u = 1/2")
	}
	const kh = 12345
	k := uint64(kh ^ kh>>33)
	pre := func(h53 uint64) uint64 { return unmix(h53<<11) ^ k }
	s := &hrwSnap{
		// "b" has the higher hash, "a" the same score and the smaller
		// name: "a" owns the key.
		nodes: []Node{{Name: "b", Weight: 2}, {Name: "a", Weight: 2}, {Name: "z", Weight: 1}},
	}
	for _, h53 := range []uint64{hi, hi - 1, 5} {
		p := pre(h53)
		s.pre = append(s.pre, p)
		s.seeds = append(s.seeds, p^p>>33) // seed ^ seed>>33 == p: the step is its own inverse
	}
	s.weights = []float64{2, 2, 1}
	s.groups = []hrwGroup{{weight: 2, nodes: []int{0, 1}, pre: s.pre[:2]}, {weight: 1, nodes: []int{2}, pre: s.pre[2:]}}
	if h := mix64(kh^s.seeds[0]) >> 11; h != hi {
		t.Fatalf("built hash %d, want %d", h, hi)
	}
	if a, b := s.score(kh, 1), s.score(kh, 0); a != b {
		t.Fatalf("the two scores differ: %v, %v", a, b)
	}
	if got := s.weightedOwner(kh); s.nodes[got].Name != "a" {
		t.Fatalf("the key went to %s, want a (equal scores, by name)", s.nodes[got].Name)
	}
	if _, ok := s.weightedTop(kh, 1); ok {
		t.Fatal("weightedTop took a weight whose first two may score alike")
	}
	if got := s.appendOwners(nil, kh, 2); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("owners %v, want [a b]", got)
	}
}

// With weights, a few owners come from each weight's highest hashes:
// they are the first of every node ranked by score, for many keys, sets
// and counts; and when a weight's n-th and (n+1)-th might score alike the
// lookup ranks every node instead (the near tie built below).
func TestRendezvousWeightedOwnersRankAsScore(t *testing.T) {
	ranked := func(s *hrwSnap, kh uint64, n int) []string {
		order := make([]int, len(s.nodes))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			if a == b {
				return 0
			}
			if s.better(s.score(kh, a), a, s.score(kh, b), b) {
				return -1
			}
			return 1
		})
		var names []string
		for _, i := range order[:n] {
			names = append(names, s.nodes[i].Name)
		}
		return names
	}
	fast := 0
	for _, size := range []int{20, 64, 200} {
		for _, spread := range []int{2, 3, 7} {
			s := weightedSnap(t, size, func(i int) int { return 1 + (i*5+1)%spread })
			for _, k := range Keys(300) {
				kh := XXHash.Sum(k)
				for m := 1; m <= 9; m++ {
					if _, ok := s.weightedTop(kh, m); ok && m <= 8 && len(s.groups)*(m+1) <= size {
						fast++
					}
					got, want := s.appendOwners(nil, kh, m), ranked(s, kh, m)
					if !slices.Equal(got, want) {
						t.Fatalf("size %d spread %d %s n=%d: %v, ranked by score %v", size, spread, k, m, got, want)
					}
				}
			}
		}
	}
	if fast == 0 {
		t.Fatal("the weights' highest hashes were never used")
	}
}

// weightedSnap is the snapshot of a rendezvous placer over n nodes named
// n0, n1..., node i of the given weight.
func weightedSnap(t *testing.T, n int, weight func(i int) int) *hrwSnap {
	t.Helper()
	var nodes []Node
	for i := range n {
		nodes = append(nodes, Node{Name: "n" + strconv.Itoa(i), Weight: weight(i)})
	}
	r, err := NewRendezvous(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r.snap.Load()
}
