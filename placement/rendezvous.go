package placement

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Rendezvous is highest-random-weight hashing (Thaler & Ravishankar 1998):
// every node scores hash(key, node) and the highest score owns the key.
// The next highest are the replicas. It keeps no table, spreads keys
// perfectly evenly, and when a node leaves only the keys it owned move, each
// to its own runner-up. A lookup costs O(N).
//
// Weights use the logarithmic method (Schindelhauer & Schomaker 2005): the
// score is w / -ln(u) for u = hash(key, node) mapped into (0, 1), which
// gives each node a share of keys exactly proportional to its weight. When
// every weight is equal the log is skipped, as it cannot change the order;
// otherwise a lookup takes one log a distinct weight, not one a node.
type Rendezvous struct {
	mu   sync.Mutex // serialises membership changes
	snap atomic.Pointer[hrwSnap]
}

var (
	_ Mutable   = (*Rendezvous)(nil)
	_ Indexer   = (*Rendezvous)(nil)
	_ Explainer = (*Rendezvous)(nil)
)

type hrwSnap struct {
	nodes   []Node
	seeds   []uint64   // xxhash of each node's name
	pre     []uint64   // seed ^ seed>>33: mix64's first step, taken ahead
	weights []float64  // each node's weight
	uniform bool       // all weights equal: compare raw hashes
	groups  []hrwGroup // not uniform: the nodes of each weight
}

// hrwGroup is the nodes of one weight: within it, the score only grows
// with the hash, so its best node is found by hash, with one log.
type hrwGroup struct {
	weight float64
	nodes  []int    // indices into the snapshot's nodes
	pre    []uint64 // their pre, in the same order
}

// NewRendezvous builds a rendezvous placer over nodes.
func NewRendezvous(nodes []Node) (*Rendezvous, error) {
	r := &Rendezvous{}
	if err := r.Set(nodes); err != nil {
		return nil, err
	}
	return r, nil
}

// Set replaces the node set.
func (r *Rendezvous) Set(nodes []Node) error {
	nodes, err := validateNodes(nodes)
	if err != nil {
		return err
	}
	s := &hrwSnap{nodes: nodes, seeds: make([]uint64, len(nodes)), pre: make([]uint64, len(nodes)), weights: make([]float64, len(nodes)), uniform: true}
	for i, n := range nodes {
		s.seeds[i] = XXHash.Sum(n.Name)
		s.pre[i] = s.seeds[i] ^ s.seeds[i]>>33
		s.weights[i] = float64(n.Weight)
		if n.Weight != nodes[0].Weight {
			s.uniform = false
		}
	}
	if !s.uniform {
		at := map[int]int{} // weight -> its group
		for i, n := range nodes {
			g, ok := at[n.Weight]
			if !ok {
				g = len(s.groups)
				at[n.Weight] = g
				s.groups = append(s.groups, hrwGroup{weight: float64(n.Weight)})
			}
			s.groups[g].nodes = append(s.groups[g].nodes, i)
			s.groups[g].pre = append(s.groups[g].pre, s.pre[i])
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snap.Store(s)
	return nil
}

// Add adds one node.
func (r *Rendezvous) Add(node Node) error {
	return r.edit(func(nodes []Node) ([]Node, error) { return addNode(nodes, node), nil })
}

// Remove removes the named node.
func (r *Rendezvous) Remove(name string) error {
	return r.edit(func(nodes []Node) ([]Node, error) { return removeNode(nodes, name) })
}

func (r *Rendezvous) edit(change func([]Node) ([]Node, error)) error {
	nodes, err := change(r.snap.Load().nodes)
	if err != nil {
		return err
	}
	return r.Set(nodes)
}

// score is node i's score for a key hash. Higher wins. With uniform
// weights it is the hash's top 53 bits, exact in a float64.
func (s *hrwSnap) score(kh uint64, i int) float64 {
	h := mix64(kh ^ s.seeds[i])
	if s.uniform {
		return float64(h >> 11)
	}
	return s.weights[i] / -math.Log(unitFloat(h))
}

// better orders (score, name) pairs: a higher score first, equal scores by
// name so the order never depends on the node list's order.
func (s *hrwSnap) better(a float64, i int, b float64, j int) bool {
	if a != b {
		return a > b
	}
	return s.nodes[i].Name < s.nodes[j].Name
}

// Owner returns the node with the highest score for key.
func (r *Rendezvous) Owner(key string) (string, error) {
	s := r.snap.Load()
	if len(s.nodes) == 0 {
		return "", ErrNoNodes
	}
	// owner's branch, spelled out: through owner, a call the inliner
	// cannot take, the lookup at 10 nodes cost a twentieth more.
	kh := XXHash.Sum(key)
	if s.uniform {
		return s.nodes[s.uniformOwner(kh)].Name, nil
	}
	return s.nodes[s.weightedOwner(kh)].Name, nil
}

// OwnerIndex is Owner as a position in Nodes().
func (r *Rendezvous) OwnerIndex(key string) (int, error) {
	s := r.snap.Load()
	if len(s.nodes) == 0 {
		return 0, ErrNoNodes
	}
	return s.owner(XXHash.Sum(key)), nil
}

// owner is the index of the node with the highest score for kh; the
// snapshot has nodes.
func (s *hrwSnap) owner(kh uint64) int {
	if s.uniform {
		return s.uniformOwner(kh)
	}
	return s.weightedOwner(kh)
}

// weightedOwner is the index of the node with the highest score for kh,
// weights not all equal, in score's order exactly, with a log a weight
// rather than a log a node. Within a group of one weight the score
// w / -ln(u) never falls as the hash (and u) grows, so the group's best
// is its highest hash: the loop finds each group's two highest hashes and
// scores the first. When the second's u is so close to the first's that
// their scores might round alike (mayTie), the group is scored node by
// node, as Owner did for every node. The groups' bests are then held
// against each other by score and name.
func (s *hrwSnap) weightedOwner(kh uint64) int {
	k := kh ^ kh>>33
	best, bestScore := -1, 0.0
	for gi := range s.groups {
		g := &s.groups[gi]
		// Four nodes a step, as uniformOwner does: most steps have no
		// hash above the second's and are passed over with one branch.
		pre := g.pre
		t := top2{j1: 0, h1: mixPre(k^pre[0]) >> 11, j2: -1}
		j := 1
		for ; j+4 <= len(pre); j += 4 {
			q := pre[j : j+4 : j+4]
			hs := [4]uint64{mixPre(k^q[0]) >> 11, mixPre(k^q[1]) >> 11, mixPre(k^q[2]) >> 11, mixPre(k^q[3]) >> 11}
			if t.j2 >= 0 && hs[0] <= t.h2 && hs[1] <= t.h2 && hs[2] <= t.h2 && hs[3] <= t.h2 {
				continue
			}
			for o, h := range hs {
				t.offer(j+o, h)
			}
		}
		for ; j < len(pre); j++ {
			t.offer(j, mixPre(k^pre[j])>>11)
		}
		u1 := unit53(t.h1)
		x1 := -math.Log(u1)
		top, sc := g.nodes[t.j1], g.weight/x1
		if t.j2 >= 0 && mayTie(u1, x1, unit53(t.h2)) {
			top, sc = s.bestIn(kh, g)
		}
		if best < 0 || s.better(sc, top, bestScore, best) {
			best, bestScore = top, sc
		}
	}
	return best
}

// top2 is a group's two highest hashes (53 bits, unitFloat's) and where
// they are; a hash equal to the highest comes second, and mayTie then
// has the group scored node by node, names included.
type top2 struct {
	j1, j2 int // j2 < 0: no second yet
	h1, h2 uint64
}

func (t *top2) offer(j int, h uint64) {
	if h <= t.h2 && t.j2 >= 0 {
		return
	}
	if h > t.h1 {
		t.j2, t.h2 = t.j1, t.h1
		t.j1, t.h1 = j, h
	} else {
		t.j2, t.h2 = j, h
	}
}

// mayTie reports whether a node whose u is next may score as the one
// whose u is u1 (x1 = -ln u1) in the same weight: when the two are so
// close that w / -ln(u) might round alike, or a last bit of the log
// reorder them. ln(u1/next) >= (u1-next)/u1 bounds the logs' gap from
// below, so a gap over 1e-12 of x1 is far above the errors of a log and a
// division (a few parts in 1e16).
func mayTie(u1, x1, next float64) bool { return u1-next <= 1e-12*u1*x1 }

// bestIn is group g's best node for kh, scored node by node.
func (s *hrwSnap) bestIn(kh uint64, g *hrwGroup) (int, float64) {
	best, bestScore := g.nodes[0], s.score(kh, g.nodes[0])
	for _, i := range g.nodes[1:] {
		if sc := s.score(kh, i); s.better(sc, i, bestScore, best) {
			best, bestScore = i, sc
		}
	}
	return best, bestScore
}

// AppendOwners appends the n highest-scoring nodes, best first. Each rank
// is a fresh scan for the best node below the previous rank, which costs
// O(n*N) but allocates nothing.
func (r *Rendezvous) AppendOwners(dst []string, key string, n int) ([]string, error) {
	s := r.snap.Load()
	if len(s.nodes) == 0 {
		return dst, ErrNoNodes
	}
	return s.appendOwners(dst, XXHash.Sum(key), min(n, len(s.nodes))), nil
}

// appendOwners is AppendOwners for the key hash kh, n at most the nodes.
// With weights, a few owners are found from each weight's few highest
// hashes (weightedTop) when that is cheaper than ranking every node.
func (s *hrwSnap) appendOwners(dst []string, kh uint64, n int) []string {
	if !s.uniform && n <= 8 && len(s.groups)*(n+1) <= len(s.nodes) {
		if top, ok := s.weightedTop(kh, n); ok {
			for _, c := range top {
				dst = append(dst, s.nodes[c.i].Name)
			}
			return dst
		}
	}
	prev, prevScore := -1, math.Inf(1)
	for range n {
		best, bestScore := -1, math.Inf(-1)
		for i := range s.nodes {
			sc := s.score(kh, i)
			if prev >= 0 && !s.better(prevScore, prev, sc, i) {
				continue // ranked already
			}
			if best < 0 || s.better(sc, i, bestScore, best) {
				best, bestScore = i, sc
			}
		}
		dst = append(dst, s.nodes[best].Name)
		prev, prevScore = best, bestScore
	}
	return dst
}

// hrwCand is a node and its hash (53 bits), then its score.
type hrwCand struct {
	i  int
	h  uint64
	sc float64
}

// weightedTop returns the n best nodes for kh, best first, in score's
// order exactly, weights not all equal: the n best of any weight are among
// that weight's n highest hashes (weightedOwner's reasoning), so each
// weight gives its n+1 highest, and unless the n-th and the (n+1)-th
// might score alike (then ok is false, and the caller ranks every node),
// its n highest are scored with the other weights' and the best n kept.
func (s *hrwSnap) weightedTop(kh uint64, n int) (top []hrwCand, ok bool) {
	k := kh ^ kh>>33
	all := make([]hrwCand, 0, len(s.groups)*(n+1))
	for gi := range s.groups {
		g := &s.groups[gi]
		mine := all[len(all):len(all)] // this weight's highest, highest first
		for j, p := range g.pre {
			h := mixPre(k^p) >> 11
			if len(mine) == n+1 && h <= mine[n].h {
				continue
			}
			if len(mine) < n+1 {
				mine = append(mine, hrwCand{})
			}
			at := len(mine) - 1
			for at > 0 && mine[at-1].h < h {
				mine[at] = mine[at-1]
				at--
			}
			mine[at] = hrwCand{i: g.nodes[j], h: h}
		}
		if len(mine) == n+1 {
			if un := unit53(mine[n-1].h); mayTie(un, -math.Log(un), unit53(mine[n].h)) {
				return nil, false
			}
			mine = mine[:n]
		}
		all = all[:len(all)+len(mine)]
	}
	for c := range all {
		all[c].sc = s.score(kh, all[c].i)
	}
	for r := range n {
		b := r
		for c := r + 1; c < len(all); c++ {
			if s.better(all[c].sc, all[c].i, all[b].sc, all[b].i) {
				b = c
			}
		}
		all[r], all[b] = all[b], all[r]
	}
	return all[:n], true
}

// Nodes returns a copy of the node set.
func (r *Rendezvous) Nodes() []Node { return copyNodes(r.snap.Load().nodes) }

// Explain lists every node's score for key, best first.
func (r *Rendezvous) Explain(key string, n int) (Explanation, error) {
	s := r.snap.Load()
	e := Explanation{Algo: "rendezvous", Key: key, Hash: XXHash}
	if len(s.nodes) == 0 {
		return e, ErrNoNodes
	}
	e.KeyHash = XXHash.Sum(key)
	order := make([]int, len(s.nodes))
	scores := make([]float64, len(s.nodes))
	for i := range order {
		order[i], scores[i] = i, s.score(e.KeyHash, i)
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case a == b:
			return 0
		case s.better(scores[a], a, scores[b], b):
			return -1
		}
		return 1
	})
	n = min(max(n, 1), len(s.nodes))
	for rank, i := range order {
		st := Step{Label: "hash(key,node)", Score: scores[i], Node: s.nodes[i].Name}
		if rank < n {
			e.Owners = append(e.Owners, s.nodes[i].Name)
			st.Note = ordinalNote(rank + 1)
		}
		if s.uniform { // the score is the raw hash: show it as one
			st.Score, st.Hash = 0, mix64(e.KeyHash^s.seeds[i])
		}
		e.Steps = append(e.Steps, st)
	}
	return e, nil
}

// uniformOwner is the index of the node with the highest hash for kh,
// all weights equal: the hot loop of the common case, with no log, no
// float and no call. The order is score's (the top 53 bits of mix64,
// ties by name), so that Owner and AppendOwners agree even on a near tie,
// but computed more cheaply. mix64's last step, x ^= x>>33, leaves the top
// 33 bits as they were, so the loop compares those (top33pre) and works the
// full order out only on a tie of them, about one key in 2^33/N. Its first
// step, x ^= x>>33, is linear in xor: for x = kh^seed it is
// (kh^kh>>33) ^ (seed^seed>>33), the key's half taken once a lookup and the
// seed's once a Set (pre), which leaves two multiplies, a shift and two
// xors a node. Four nodes a step: their hashes are independent, so the
// processor computes them side by side, and they are held against the best
// one by one, in straight-line code (a loop over the four cost a tenth more
// at ten nodes), only when one of them might beat it.
func (s *hrwSnap) uniformOwner(kh uint64) int {
	pre := s.pre
	k := kh ^ kh>>33
	best, bestTop := 0, top33pre(k^pre[0])
	i := 1
	for ; i+4 <= len(pre); i += 4 {
		q := pre[i : i+4 : i+4]
		t0, t1, t2, t3 := top33pre(k^q[0]), top33pre(k^q[1]), top33pre(k^q[2]), top33pre(k^q[3])
		if t0 < bestTop && t1 < bestTop && t2 < bestTop && t3 < bestTop {
			continue
		}
		if t0 > bestTop || t0 == bestTop && s.beats(kh, i, best) {
			best, bestTop = i, t0
		}
		if t1 > bestTop || t1 == bestTop && s.beats(kh, i+1, best) {
			best, bestTop = i+1, t1
		}
		if t2 > bestTop || t2 == bestTop && s.beats(kh, i+2, best) {
			best, bestTop = i+2, t2
		}
		if t3 > bestTop || t3 == bestTop && s.beats(kh, i+3, best) {
			best, bestTop = i+3, t3
		}
	}
	for ; i < len(pre); i++ {
		if t := top33pre(k ^ pre[i]); t > bestTop || t == bestTop && s.beats(kh, i, best) {
			best, bestTop = i, t
		}
	}
	return best
}

// top33pre is the top 33 bits of mix64(x) given x^x>>33: mix64 without its
// first step, which the caller took, and its last, which leaves those bits
// alone.
func top33pre(y uint64) uint64 { return premixed(y) >> 31 }

// mixPre is mix64(x) given x^x>>33.
func mixPre(y uint64) uint64 {
	y = premixed(y)
	return y ^ y>>33
}

// beats reports whether node i ranks above node j for kh in score's
// order: on the tie of top33pre that calls it.
func (s *hrwSnap) beats(kh uint64, i, j int) bool {
	return s.better(s.score(kh, i), i, s.score(kh, j), j)
}
