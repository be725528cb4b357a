package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// DefaultVNodes is the number of points a node of weight 1 gets on a Ring
// when RingOptions.VNodes is zero.
const DefaultVNodes = 100

// RingOptions configures a Ring. The zero value means 100 points per unit of
// weight and xxHash.
type RingOptions struct {
	// VNodes is the number of points per unit of weight. A node of weight w
	// gets w*VNodes points, named "name#0" .. "name#(w*VNodes-1)".
	VNodes int
	// Hash is the hash of both points and keys.
	Hash Hash
}

func (o RingOptions) normalize() (RingOptions, error) {
	if o.VNodes == 0 {
		o.VNodes = DefaultVNodes
	}
	if o.VNodes < 1 {
		return o, fmt.Errorf("placement: vnodes must be at least 1 (got %d)", o.VNodes)
	}
	if o.Hash != XXHash && o.Hash != MD5 {
		return o, fmt.Errorf("placement: unknown hash %v", o.Hash)
	}
	return o, nil
}

// Ring is a consistent hash ring with virtual nodes (Karger et al. 1997).
//
// Each node is hashed onto a circle at VNodes points per unit of weight; a
// key belongs to the first point strictly greater than its own hash,
// wrapping past the last point to the first. Points with equal hashes are
// ordered by node name, then point index, so every process builds the same
// ring. Replicas are the next R distinct nodes clockwise (Dynamo).
//
// A worked example with three points, hashes 10 (a#0), 20 (b#0), 30 (c#0):
// a key hashing to 15 goes to b; to 20, also past b's point, so to c; to 35,
// past the end, so it wraps to a. With R=2 the key at 15 is stored on b, c.
//
// Adding a node merges its points into the sorted array, and removing one
// filters them out: neither rehashes the points that stay.
type Ring struct {
	opts RingOptions // immutable after NewRing
	mu   sync.Mutex  // serialises membership changes
	snap atomic.Pointer[ringSnap]
}

var (
	_ Mutable   = (*Ring)(nil)
	_ Indexer   = (*Ring)(nil)
	_ Explainer = (*Ring)(nil)
)

// ringSnap is one immutable membership: the points in clockwise order, as
// parallel arrays so the binary search touches only hashes.
type ringSnap struct {
	nodes  []Node
	hashes []uint64 // sorted, clockwise
	owners []int32  // owners[i] indexes nodes: the node of point i
	vnodes []int32  // vnodes[i]: point i is "owner#vnodes[i]"
	// index[b] is the first point whose hash, shifted right by shift, is at
	// least b: the top bits of a key's hash narrow the binary search to a
	// bucket of about one point, so a lookup costs two or three cache
	// misses instead of log2(points).
	index []uint32
	shift uint
}

type ringPoint struct {
	hash  uint64
	owner int32
	vnode int32
}

// NewRing builds a ring over nodes.
func NewRing(nodes []Node, opts RingOptions) (*Ring, error) {
	opts, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	r := &Ring{opts: opts}
	if err := r.Set(nodes); err != nil {
		return nil, err
	}
	return r, nil
}

// Set replaces the node set, building the ring anew.
func (r *Ring) Set(nodes []Node) error {
	nodes, err := validateNodes(nodes)
	if err != nil {
		return err
	}
	count := 0
	for _, n := range nodes {
		count += n.Weight * r.opts.VNodes
	}
	pts := make([]ringPoint, 0, count)
	for i, n := range nodes {
		pts = r.appendPoints(pts, n, int32(i))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snap.Store(newRingSnap(nodes, r.sortPoints(nodes, pts), r.opts.Hash.bits()))
	return nil
}

// Add merges one node's points into the ring without rehashing the others.
func (r *Ring) Add(node Node) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.snap.Load()
	nodes, err := validateNodes(addNode(old.nodes, node))
	if err != nil {
		return err
	}
	idx := int32(len(nodes) - 1)
	fresh := r.sortPoints(nodes, r.appendPoints(nil, nodes[idx], idx))
	merged := make([]ringPoint, 0, len(old.hashes)+len(fresh))
	i, j := 0, 0
	for i < len(old.hashes) && j < len(fresh) {
		p := old.point(i)
		if comparePoints(nodes, p, fresh[j]) <= 0 {
			merged = append(merged, p)
			i++
		} else {
			merged = append(merged, fresh[j])
			j++
		}
	}
	for ; i < len(old.hashes); i++ {
		merged = append(merged, old.point(i))
	}
	merged = append(merged, fresh[j:]...)
	r.snap.Store(newRingSnap(nodes, merged, r.opts.Hash.bits()))
	return nil
}

// Remove drops the named node's points; the others keep their places.
func (r *Ring) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.snap.Load()
	idx := slices.IndexFunc(old.nodes, func(n Node) bool { return n.Name == name })
	if idx < 0 {
		return fmt.Errorf("%w %q", ErrUnknownNode, name)
	}
	nodes, _ := removeNode(old.nodes, name)
	kept := make([]ringPoint, 0, len(old.hashes))
	for i := range old.hashes {
		p := old.point(i)
		switch {
		case p.owner == int32(idx):
			continue
		case p.owner > int32(idx):
			p.owner--
		}
		kept = append(kept, p)
	}
	r.snap.Store(newRingSnap(nodes, kept, r.opts.Hash.bits()))
	return nil
}

// appendPoints hashes node n's points "name#i".
func (r *Ring) appendPoints(pts []ringPoint, n Node, owner int32) []ringPoint {
	count := n.weight() * r.opts.VNodes
	buf := make([]byte, 0, len(n.Name)+12)
	buf = append(buf, n.Name...)
	buf = append(buf, '#')
	base := len(buf)
	for i := range count {
		buf = strconv.AppendInt(buf[:base], int64(i), 10)
		pts = append(pts, ringPoint{hash: r.opts.Hash.sumBytes(buf), owner: owner, vnode: int32(i)})
	}
	return pts
}

func (r *Ring) sortPoints(nodes []Node, pts []ringPoint) []ringPoint {
	slices.SortFunc(pts, func(a, b ringPoint) int { return comparePoints(nodes, a, b) })
	return pts
}

// comparePoints orders points by hash, then node name, then point index:
// the tie-break makes the ring the same in every process whatever the order
// nodes were added in.
func comparePoints(nodes []Node, a, b ringPoint) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	if c := cmp.Compare(nodes[a.owner].Name, nodes[b.owner].Name); c != 0 {
		return c
	}
	return cmp.Compare(a.vnode, b.vnode)
}

func newRingSnap(nodes []Node, pts []ringPoint, hashBits uint) *ringSnap {
	s := &ringSnap{
		nodes:  nodes,
		hashes: make([]uint64, len(pts)),
		owners: make([]int32, len(pts)),
		vnodes: make([]int32, len(pts)),
	}
	for i, p := range pts {
		s.hashes[i], s.owners[i], s.vnodes[i] = p.hash, p.owner, p.vnode
	}
	// One bucket per point, rounded up to a power of two, at most 2^20.
	bits := uint(1)
	for bits < 20 && 1<<bits < len(pts) {
		bits++
	}
	s.shift = hashBits - bits
	s.index = make([]uint32, 1<<bits+1)
	p := 0
	for b := range s.index {
		for p < len(s.hashes) && s.hashes[p]>>s.shift < uint64(b) {
			p++
		}
		s.index[b] = uint32(p)
	}
	return s
}

func (s *ringSnap) point(i int) ringPoint {
	return ringPoint{hash: s.hashes[i], owner: s.owners[i], vnode: s.vnodes[i]}
}

// search returns the index of the first point strictly greater than h,
// wrapping to 0 past the end. The ring must not be empty.
func (s *ringSnap) search(h uint64) int {
	// Every point in [index[b], index[b+1]) shares h's top bits; points
	// before lo are smaller than h, points from hi on are greater.
	b := h >> s.shift
	lo, hi := int(s.index[b]), int(s.index[b+1])
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.hashes[mid] <= h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(s.hashes) {
		return 0
	}
	return lo
}

// Owner returns the node of the first point clockwise from key's hash.
func (r *Ring) Owner(key string) (string, error) {
	s := r.snap.Load()
	if len(s.hashes) == 0 {
		return "", ErrNoNodes
	}
	return s.nodes[s.owner(r.opts.Hash.Sum(key))].Name, nil
}

// OwnerIndex is Owner as a position in Nodes().
func (r *Ring) OwnerIndex(key string) (int, error) {
	s := r.snap.Load()
	if len(s.hashes) == 0 {
		return 0, ErrNoNodes
	}
	return s.owner(r.opts.Hash.Sum(key)), nil
}

// owner is the index of the node of the first point clockwise from h;
// the ring has points.
func (s *ringSnap) owner(h uint64) int { return int(s.owners[s.search(h)]) }

// AppendOwners walks clockwise from key's hash and appends the first r
// distinct nodes it meets, skipping points of nodes already taken.
func (r *Ring) AppendOwners(dst []string, key string, n int) ([]string, error) {
	s := r.snap.Load()
	if len(s.hashes) == 0 {
		return dst, ErrNoNodes
	}
	n = min(n, len(s.nodes))
	start := len(dst)
	i := s.search(r.opts.Hash.Sum(key))
	for len(dst)-start < n {
		name := s.nodes[s.owners[i]].Name
		if !slices.Contains(dst[start:], name) {
			dst = append(dst, name)
		}
		if i++; i == len(s.hashes) {
			i = 0
		}
	}
	return dst, nil
}

// Nodes returns a copy of the node set.
func (r *Ring) Nodes() []Node { return copyNodes(r.snap.Load().nodes) }

// Points returns how many points the ring holds.
func (r *Ring) Points() int { return len(r.snap.Load().hashes) }

// Options returns the ring's normalised options.
func (r *Ring) Options() RingOptions { return r.opts }

// Explain shows the clockwise walk for key: the point just before its hash,
// then every point passed until n distinct owners are found.
func (r *Ring) Explain(key string, n int) (Explanation, error) {
	s := r.snap.Load()
	e := Explanation{Algo: "ring", Key: key, Hash: r.opts.Hash}
	if len(s.hashes) == 0 {
		return e, ErrNoNodes
	}
	e.KeyHash = r.opts.Hash.Sum(key)
	n = min(max(n, 1), len(s.nodes))
	i := s.search(e.KeyHash)
	prev := (i - 1 + len(s.hashes)) % len(s.hashes)
	e.Steps = append(e.Steps, Step{
		Label: s.pointName(prev), Hash: s.hashes[prev], Node: s.nodes[s.owners[prev]].Name,
		Note: "last point at or before the key (not the owner)",
	})
	if i == 0 && e.KeyHash >= s.hashes[len(s.hashes)-1] {
		e.Steps = append(e.Steps, Step{Note: "past the last point: wrap around to the first"})
	}
	for len(e.Owners) < n {
		name := s.nodes[s.owners[i]].Name
		st := Step{Label: s.pointName(i), Hash: s.hashes[i], Node: name}
		if slices.Contains(e.Owners, name) {
			st.Note = "already chosen, walk on"
		} else {
			e.Owners = append(e.Owners, name)
			st.Note = ordinalNote(len(e.Owners))
		}
		e.Steps = append(e.Steps, st)
		if i++; i == len(s.hashes) {
			i = 0
			if len(e.Owners) < n {
				e.Steps = append(e.Steps, Step{Note: "past the last point: wrap around to the first"})
			}
		}
	}
	return e, nil
}

func (s *ringSnap) pointName(i int) string {
	return s.nodes[s.owners[i]].Name + "#" + strconv.Itoa(int(s.vnodes[i]))
}

// Point is one virtual node on a ring: where on the circle it sits and
// whose it is.
type Point struct {
	Label string `json:"label"` // "name#i"
	Node  string `json:"node"`
	Hash  uint64 `json:"hash"`
	// At is the point's place on the circle as a fraction of a turn
	// clockwise from the top, in [0, 1).
	At float64 `json:"at"`
}

// Circle returns the ring's points in clockwise order: what article 000
// draws on its clock face.
func (r *Ring) Circle() []Point {
	s := r.snap.Load()
	out := make([]Point, len(s.hashes))
	for i, h := range s.hashes {
		out[i] = Point{Label: s.pointName(i), Node: s.nodes[s.owners[i]].Name, Hash: h, At: r.opts.Hash.Turn(h)}
	}
	return out
}
