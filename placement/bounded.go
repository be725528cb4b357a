package placement

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// DefaultEpsilon is the slack of a Bounded placer when
// BoundedOptions.Epsilon is zero: no node takes more than 1.25 times the
// average load.
const DefaultEpsilon = 0.25

// BoundedOptions configures a Bounded placer.
type BoundedOptions struct {
	Ring RingOptions
	// Epsilon sets the load factor 1+Epsilon: a node at or above
	// ceil((1+Epsilon) * total * weight/totalWeight) takes no new key.
	// Zero means DefaultEpsilon.
	Epsilon float64
}

// Bounded is consistent hashing with bounded loads (Mirrokni, Thorup &
// Zadimoghaddam 2016; used by Vimeo and HAProxy's hash-balance-factor). Keys
// are placed on a Ring, but a node whose load is at or above the bound does
// not take a new key: the key walks on clockwise to the next node under it.
// No node ever holds more than about (1+eps) times the average, however hot
// a part of the ring is, and a key still lands on its ring owner whenever
// that owner is not full.
//
// The load is whatever the caller says it is: Acquire places a key and
// counts one unit on its node, Release gives the unit back. Both are safe
// from any number of goroutines; a node's counter changes only by
// compare-and-swap, so no Acquire overshoots the bound it saw.
type Bounded struct {
	eps     float64    // immutable after NewBounded
	ring    *Ring      // membership; its snapshot is mirrored in snap
	mu      sync.Mutex // serialises membership changes
	snap    atomic.Pointer[boundedSnap]
	loads   *loadTable // shared with the placers WithNodes derives
	derived bool       // made by WithNodes: nodes leaving are not retired
}

// loadTable holds the load counters by node name, and their total.
type loadTable struct {
	mu     sync.Mutex
	byName map[string]*atomic.Int64 // guarded by mu
	total  atomic.Int64             // units held on live nodes
}

// counter returns name's counter, creating it at zero.
func (t *loadTable) counter(name string) *atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.byName[name]
	if c == nil {
		c = new(atomic.Int64)
		t.byName[name] = c
	}
	return c
}

// retire takes a node that left off the table: its units leave the total,
// and a late Release of them is a no-op.
func (t *loadTable) retire(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.byName[name]; c != nil {
		t.total.Add(-max(c.Swap(dead), 0))
		delete(t.byName, name)
	}
}

var (
	_ Mutable   = (*Bounded)(nil)
	_ Explainer = (*Bounded)(nil)
)

// dead marks the counter of a node that has left: its units were taken off
// the total when it left, so a late Release must not take them again.
const dead = math.MinInt64 / 2

type boundedSnap struct {
	ring        *ringSnap
	loads       []*atomic.Int64 // aligned with ring.nodes; from the load table, by name
	byName      map[string]*atomic.Int64
	totalWeight float64
}

// NewBounded builds a bounded-load placer over nodes.
func NewBounded(nodes []Node, opts BoundedOptions) (*Bounded, error) {
	if opts.Epsilon == 0 {
		opts.Epsilon = DefaultEpsilon
	}
	if opts.Epsilon < 0 || math.IsNaN(opts.Epsilon) || math.IsInf(opts.Epsilon, 0) {
		return nil, fmt.Errorf("placement: epsilon must be positive (got %v)", opts.Epsilon)
	}
	ring, err := NewRing(nodes, opts.Ring)
	if err != nil {
		return nil, err
	}
	b := &Bounded{eps: opts.Epsilon, ring: ring, loads: &loadTable{byName: map[string]*atomic.Int64{}}}
	b.publish()
	return b, nil
}

// WithNodes returns a placer over nodes, with b's options, that shares b's
// loads: a node in both counts the same units, and units released through
// either reach the same counters. b itself does not change, so a placer
// built for a membership change that is then abandoned leaves b as it was
// (a balancer builds its next snapshot beside the running one this way).
// Nodes that leave a derived placer keep their counters until their units
// are released.
func (b *Bounded) WithNodes(nodes []Node) (*Bounded, error) {
	ring, err := NewRing(nodes, b.ring.opts)
	if err != nil {
		return nil, err
	}
	d := &Bounded{eps: b.eps, ring: ring, loads: b.loads, derived: true}
	d.publish()
	return d, nil
}

// publish mirrors the ring's snapshot, carrying each remaining node's load
// over by name and retiring the loads of nodes that left.
func (b *Bounded) publish() {
	rs := b.ring.snap.Load()
	s := &boundedSnap{ring: rs, loads: make([]*atomic.Int64, len(rs.nodes)), byName: make(map[string]*atomic.Int64, len(rs.nodes))}
	old := b.snap.Load()
	for i, n := range rs.nodes {
		c := b.loads.counter(n.Name)
		s.loads[i], s.byName[n.Name] = c, c
		s.totalWeight += float64(n.Weight)
	}
	if old != nil && !b.derived {
		for name := range old.byName {
			if _, ok := s.byName[name]; !ok {
				b.loads.retire(name)
			}
		}
	}
	b.snap.Store(s)
}

// Set replaces the node set. Loads of nodes that remain are kept.
func (b *Bounded) Set(nodes []Node) error { return b.edit(func() error { return b.ring.Set(nodes) }) }

// Add adds a node.
func (b *Bounded) Add(node Node) error { return b.edit(func() error { return b.ring.Add(node) }) }

// Remove removes a node. Its units leave the total; releasing them later is
// a no-op.
func (b *Bounded) Remove(name string) error {
	return b.edit(func() error { return b.ring.Remove(name) })
}

func (b *Bounded) edit(change func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := change(); err != nil {
		return err
	}
	b.publish()
	return nil
}

// bound is the most units node i may hold when total units are placed.
func (b *Bounded) bound(s *boundedSnap, i int32, total int64) int64 {
	share := float64(s.ring.nodes[i].Weight) / s.totalWeight
	return int64(math.Ceil((1 + b.eps) * float64(total) * share))
}

// Acquire places key on the first node clockwise from its hash whose load is
// under the bound, counts one unit on it and returns it. Call Release with
// the returned name when the key's work is done.
func (b *Bounded) Acquire(key string) (string, error) { return b.AcquireFunc(key, nil) }

// AcquireFunc is Acquire over the nodes for which ok reports true (nil
// means every node): a balancer passes its availability predicate, so the
// walk also steps past endpoints that are down. When every acceptable node
// is at its bound, the first acceptable one clockwise takes the key anyway;
// when no node is acceptable, it returns ErrNoNodes.
func (b *Bounded) AcquireFunc(key string, ok func(name string) bool) (string, error) {
	s := b.snap.Load()
	okAt := func(o int) bool { return ok == nil || ok(s.ring.nodes[o].Name) }
	o, err := b.acquire(s, key, okAt)
	if err != nil {
		return "", err
	}
	return s.ring.nodes[o].Name, nil
}

// AcquireIndex is AcquireFunc by position: ok is asked of a node's
// position in Nodes(), and the position of the node that took the key is
// returned, for a caller that keeps its own array of nodes (a balancer's
// endpoints) and would otherwise look each name up on the way. Give the
// unit back with ReleaseIndex while the membership is the same (Nodes
// unchanged), else with Release.
func (b *Bounded) AcquireIndex(key string, ok func(i int) bool) (int, error) {
	o, err := b.acquire(b.snap.Load(), key, ok)
	return int(o), err
}

// acquire walks s clockwise from key's hash to the first node ok accepts
// that is under its bound, and counts a unit on it.
func (b *Bounded) acquire(s *boundedSnap, key string, ok func(i int) bool) (int32, error) {
	if len(s.ring.hashes) == 0 {
		return -1, ErrNoNodes
	}
	total := b.loads.total.Add(1)
	start := s.ring.search(b.ring.opts.Hash.Sum(key))
	fallback := int32(-1)
	for step, i := 0, start; step < len(s.ring.hashes); step++ {
		o := s.ring.owners[i]
		if ok(int(o)) {
			if fallback < 0 {
				fallback = o
			}
			c, limit := s.loads[o], b.bound(s, o, total)
			for cur := c.Load(); cur >= 0 && cur < limit; cur = c.Load() {
				if c.CompareAndSwap(cur, cur+1) {
					return o, nil
				}
			}
		}
		if i++; i == len(s.ring.hashes) {
			i = 0
		}
	}
	if fallback < 0 {
		b.loads.total.Add(-1)
		return -1, ErrNoNodes
	}
	// Every acceptable node was at its bound: only possible while other
	// goroutines race this one, or when most nodes are unacceptable.
	s.loads[fallback].Add(1)
	return fallback, nil
}

// Release gives back one unit acquired on node name. It reports false, and
// changes nothing, when the node has left or holds no units.
func (b *Bounded) Release(name string) bool { return b.release(b.snap.Load().byName[name]) }

// ReleaseIndex gives back one unit acquired with AcquireIndex on the node
// at position i of Nodes(), the membership unchanged since. It reports
// false, and changes nothing, when there is no such node or it holds no
// units.
func (b *Bounded) ReleaseIndex(i int) bool {
	loads := b.snap.Load().loads
	if i < 0 || i >= len(loads) {
		return false
	}
	return b.release(loads[i])
}

func (b *Bounded) release(c *atomic.Int64) bool {
	if c == nil {
		return false
	}
	for cur := c.Load(); cur > 0; cur = c.Load() {
		if c.CompareAndSwap(cur, cur-1) {
			b.loads.total.Add(-1)
			return true
		}
	}
	return false
}

// Load returns the units node name holds now.
func (b *Bounded) Load(name string) int64 {
	if c := b.snap.Load().byName[name]; c != nil {
		return max(c.Load(), 0)
	}
	return 0
}

// Total returns the units held across all nodes.
func (b *Bounded) Total() int64 { return b.loads.total.Load() }

// Owner returns where Acquire would place key now, without counting it.
func (b *Bounded) Owner(key string) (string, error) {
	s := b.snap.Load()
	if len(s.ring.hashes) == 0 {
		return "", ErrNoNodes
	}
	total := b.loads.total.Load() + 1
	start := s.ring.search(b.ring.opts.Hash.Sum(key))
	for step, i := 0, start; step < len(s.ring.hashes); step++ {
		if o := s.ring.owners[i]; s.loads[o].Load() < b.bound(s, o, total) {
			return s.ring.nodes[o].Name, nil
		}
		if i++; i == len(s.ring.hashes) {
			i = 0
		}
	}
	return s.ring.nodes[s.ring.owners[start]].Name, nil
}

// AppendOwners appends up to n distinct nodes in clockwise order from key's
// hash, those under the bound first (the first is where Acquire would put
// the key now), then those at or over it.
func (b *Bounded) AppendOwners(dst []string, key string, n int) ([]string, error) {
	s := b.snap.Load()
	if len(s.ring.hashes) == 0 {
		return dst, ErrNoNodes
	}
	n = min(n, len(s.ring.nodes))
	start := len(dst)
	total := b.loads.total.Load() + 1
	origin := s.ring.search(b.ring.opts.Hash.Sum(key))
	for _, underOnly := range []bool{true, false} {
		for step, i := 0, origin; step < len(s.ring.hashes) && len(dst)-start < n; step++ {
			o := s.ring.owners[i]
			name := s.ring.nodes[o].Name
			under := s.loads[o].Load() < b.bound(s, o, total)
			if under == underOnly && !slices.Contains(dst[start:], name) {
				dst = append(dst, name)
			}
			if i++; i == len(s.ring.hashes) {
				i = 0
			}
		}
	}
	return dst, nil
}

// Nodes returns a copy of the node set.
func (b *Bounded) Nodes() []Node { return b.ring.Nodes() }

// Circle returns the points of the ring the bounds are kept on.
func (b *Bounded) Circle() []Point { return b.ring.Circle() }

// Epsilon returns the load slack.
func (b *Bounded) Epsilon() float64 { return b.eps }

// Explain shows the clockwise walk with each node's load against its bound.
func (b *Bounded) Explain(key string, n int) (Explanation, error) {
	s := b.snap.Load()
	e := Explanation{Algo: "bounded", Key: key, Hash: b.ring.opts.Hash}
	if len(s.ring.hashes) == 0 {
		return e, ErrNoNodes
	}
	e.KeyHash = b.ring.opts.Hash.Sum(key)
	total := b.loads.total.Load() + 1
	i := s.ring.search(e.KeyHash)
	e.Steps = append(e.Steps, Step{Note: fmt.Sprintf("load factor %.2f, %d units placed with this key", 1+b.eps, total)})
	var visited []string // distinct nodes met so far
	for step := 0; step < len(s.ring.hashes) && len(visited) < len(s.ring.nodes); step++ {
		o := s.ring.owners[i]
		name := s.ring.nodes[o].Name
		st := Step{Label: s.ring.pointName(i), Hash: s.ring.hashes[i], Node: name}
		load, limit := max(s.loads[o].Load(), 0), b.bound(s, o, total)
		first := !slices.Contains(visited, name)
		if first {
			visited = append(visited, name)
		}
		switch {
		case slices.Contains(e.Owners, name):
			st.Note = "already chosen, walk on"
		case load >= limit:
			st.Note = fmt.Sprintf("full (%d >= bound %d), walk on", load, limit)
		default:
			e.Owners = append(e.Owners, name)
			st.Note = fmt.Sprintf("%s (%d < bound %d)", ordinalNote(len(e.Owners)), load, limit)
		}
		e.Steps = append(e.Steps, st)
		if len(e.Owners) >= max(n, 1) {
			break
		}
		if i++; i == len(s.ring.hashes) {
			i = 0
		}
	}
	return e, nil
}
