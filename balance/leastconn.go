package balance

import (
	"sync"
	"sync/atomic"

	"github.com/rotor-lb/rotor/health"
)

// LeastConn sends each request to the available endpoint with the fewest
// requests in flight; ties are broken at random, since always taking the
// first would pile every quiet-time request onto endpoint 0.
//
// While most endpoints are idle, which is most of the time in a pool
// sized for its peaks, any idle endpoint is a least loaded one: a pick
// draws a few endpoints at random and takes the first idle and available
// one, uniformly among the idle, with no lock and nothing to keep up to
// date.
//
// When the draws find none, the picker keeps its endpoints in buckets by
// in-flight count, moved as each request is admitted and released (the
// endpoints' health states tell it, through a health.Watch), so a pick
// looks in the lowest bucket instead of scanning every endpoint: O(1)
// expected while the least loaded endpoints are available, whatever the
// pool's size and load (HAProxy keeps its leastconn servers in a tree
// for the same reason). Unavailable endpoints stay in their bucket and
// are stepped over. Keeping the index costs every admit and release a
// short critical section, so the picker lets it go again once three
// quarters of the endpoints are idle at a pick, and it has served at
// least twice as many picks as there are endpoints since it was built
// (which costs a move an endpoint, so that building it is paid for).
//
// A picker that is seldom asked (sticky's, which places only keys it has
// not seen) also lets its index go once the moves since its last pick
// would have paid for building it again (twice the endpoints, and 64).
type LeastConn struct{}

var _ Policy = LeastConn{}

// Name returns "least_conn".
func (LeastConn) Name() string { return "least_conn" }

// Build returns a picker over s. It starts keeping its index at its first
// pick, so that a snapshot built beside the running one and never
// published changes nothing.
func (LeastConn) Build(s *Set) Picker {
	p := &lcPicker{order: lcBuckets{set: s}}
	p.init(s, &p.order)
	return p
}

// WeightedLeastConn is least connections with capacity: the endpoint with
// the least (in-flight + 1) / weight wins, so an idle endpoint of weight 2
// is preferred to an idle one of weight 1, and a busy big one takes twice
// the requests of a small one.
//
// It keeps least_conn's shape. While most of the heaviest endpoints are
// idle, any idle one of them is a least loaded endpoint (none can do
// better than 1 / the largest weight): a pick draws a few of them at
// random and takes the first idle and available one, with no lock. When
// the draws find none, the picker keeps its endpoints in a heap ordered
// by (in-flight + 1) / weight, moved as requests are admitted and
// released, so a pick reads the heap's top instead of scanning every
// endpoint: O(log N) a move, O(1) a pick while the least loaded are
// available (HAProxy's leastconn, weighted too, keeps a tree for the
// same reason). Endpoints equally loaded for their weight take their
// turns in the order they came to that load, as in HAProxy's tree. It
// lets the heap go as least_conn lets its buckets go, counting the
// heaviest endpoints' idle ones.
type WeightedLeastConn struct{}

var _ Policy = WeightedLeastConn{}

// Name returns "weighted_least_conn".
func (WeightedLeastConn) Name() string { return "weighted_least_conn" }

// Build returns a picker over s; it starts keeping its heap at its first
// pick that needs it, as least_conn's does.
func (WeightedLeastConn) Build(s *Set) Picker {
	p := &wlcPicker{order: wlcHeap{set: s}}
	var top int64
	for i := range s.states {
		switch w := s.states[i].weight; {
		case w > top:
			top, p.order.heavy = w, append(p.order.heavy[:0], int32(i))
		case w == top:
			p.order.heavy = append(p.order.heavy, int32(i))
		}
	}
	p.order.top = top
	p.init(s, &p.order)
	return p
}

// watchSeq orders the pickers that watch states: a later one takes over.
var watchSeq atomic.Uint64

// lcDraws is how many endpoints a pick draws looking for an idle one
// while the index is not kept: with three quarters idle, all four draws
// miss one pick in 256.
const lcDraws = 4

// loadOrder is how a loadIndex orders its endpoints by load. Its methods
// are called with the index's mu held.
type loadOrder interface {
	// reset empties the order, every endpoint out of it.
	reset()
	// place moves endpoint i to where its in-flight count now puts it.
	place(i int)
	// least returns the available endpoint the policy picks, or -1.
	least() int
	// mostIdle reports whether a pick's draws would find an idle
	// endpoint: the index is no longer worth keeping.
	mostIdle() bool
}

// loadIndex keeps a set's endpoints ordered by load while picks need it:
// least_conn's and weighted_least_conn's pickers, which differ in their
// order and their draws.
type loadIndex struct {
	set       *Set
	order     loadOrder
	watches   []health.Watch // one per endpoint
	idleMoves int            // moves without a pick after which the index is let go

	mu sync.Mutex
	// scan: the index is not kept, as the picker was retired (its
	// snapshot replaced) or a later picker watches the same states; a
	// pick scans every endpoint.
	scan bool
	// watching: the index is kept up to date. False until a pick's
	// draws find no idle endpoint, and again once most are idle or after
	// idleMoves moves without a pick. Written under mu; read without it
	// by a pick deciding whether to draw.
	watching atomic.Bool
	moves    int // since the last pick
	picks    int // since the index was built
}

func (x *loadIndex) init(s *Set, order loadOrder) {
	x.set, x.order = s, order
	x.watches, x.idleMoves = make([]health.Watch, len(s.states)), 2*len(s.states)+64
	seq := watchSeq.Add(1)
	for i := range x.watches {
		x.watches[i] = health.Watch{Seq: seq, Changed: func() { x.moved(i) }}
	}
}

// watch installs the watches and fills the order from the counts now.
// Called with mu held.
func (x *loadIndex) watch() {
	x.order.reset()
	x.moves, x.picks = 0, 0
	x.watching.Store(true)
	for i := range x.set.states {
		if !x.set.states[i].SetWatch(&x.watches[i]) {
			x.scan = true // a picker built later keeps these states
		}
		x.order.place(i)
	}
}

// unwatch removes the watches: the index is no longer kept. Called with
// mu held.
func (x *loadIndex) unwatch() {
	x.watching.Store(false)
	for i := range x.set.states {
		x.set.states[i].ClearWatch(&x.watches[i])
	}
}

// retire stops keeping the index: the snapshot was replaced. Picks that
// still come (requests that took the old snapshot) scan.
func (x *loadIndex) retire() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.scan = true
	x.unwatch()
}

// moved is endpoint i's watch: its in-flight count changed. Watches are
// installed by watch, under mu, after the order is reset. Every change is
// followed by a place that reads the count after it, so the last one
// leaves the endpoint where it belongs.
func (x *loadIndex) moved(i int) {
	x.mu.Lock()
	if !x.scan && x.watching.Load() {
		x.order.place(i)
		if x.moves++; x.moves > x.idleMoves {
			x.unwatch() // seldom asked: cheaper to build again
		}
	}
	x.mu.Unlock()
}

// pick is a pick the draws did not settle: through the index, built first
// if it is not kept, or a scan once the picker is retired.
func (x *loadIndex) pick(weighted bool) (*Endpoint, error) {
	s := x.set
	x.mu.Lock()
	if !x.scan && !x.watching.Load() {
		x.watch()
	}
	if x.scan {
		x.mu.Unlock()
		return endpointAt(s, scanLeast(s, nil, weighted))
	}
	x.moves = 0
	i := x.order.least()
	if x.picks++; x.picks >= 2*len(s.states) && x.order.mostIdle() {
		x.unwatch() // most are idle again: draws find them
	}
	x.mu.Unlock()
	return endpointAt(s, i)
}

type lcPicker struct {
	loadIndex
	order lcBuckets
}

func (p *lcPicker) Pick(Request) (*Endpoint, error) {
	s := p.set
	n := len(s.states)
	if n == 0 {
		return nil, ErrNoEndpoint
	}
	if !p.watching.Load() {
		for range lcDraws {
			i := intn(s.rand, n)
			if st := &s.states[i]; st.Inflight() == 0 && st.Available(s.clock, st.max) {
				return s.endpoints[i], nil
			}
		}
	}
	return p.pick(false)
}

// lcLevels bounds the buckets: endpoints with lcLevels-1 requests or more
// in flight share the last one, where the least loaded is searched for.
const lcLevels = 256

// lcBuckets is least_conn's order: endpoints in buckets by in-flight
// count.
type lcBuckets struct {
	set     *Set
	level   []int32   // each endpoint's bucket, -1 when out
	pos     []int32   // its place in the bucket
	buckets [][]int32 // endpoints by in-flight count, up to lcLevels-1
	low     int       // no bucket below it holds an endpoint
}

func (o *lcBuckets) reset() {
	n := len(o.set.states)
	if o.level == nil {
		o.level, o.pos, o.buckets = make([]int32, n), make([]int32, n), make([][]int32, lcLevels)
	}
	for k := range o.buckets {
		o.buckets[k] = o.buckets[k][:0]
	}
	for i := range o.level {
		o.level[i] = -1
	}
	o.low = 0
}

func (o *lcBuckets) place(i int) {
	k := int32(min(max(o.set.states[i].Inflight(), 0), lcLevels-1))
	old := o.level[i]
	if old == k {
		return
	}
	if old >= 0 {
		b := o.buckets[old]
		last := b[len(b)-1]
		b[o.pos[i]], o.pos[last] = last, o.pos[i]
		o.buckets[old] = b[:len(b)-1]
	}
	o.buckets[k] = append(o.buckets[k], int32(i))
	o.level[i], o.pos[i] = k, int32(len(o.buckets[k])-1)
	o.low = min(o.low, int(k))
}

// least returns an available endpoint of the lowest bucket that has one,
// at random within it, or -1.
func (o *lcBuckets) least() int {
	s := o.set
	for k := o.low; k < lcLevels; k++ {
		b := o.buckets[k]
		if len(b) == 0 {
			if k == o.low {
				o.low++
			}
			continue
		}
		if k == lcLevels-1 {
			// Every load from here up: the least of them.
			return scanLeast(s, b, false)
		}
		start := intn(s.rand, len(b))
		for j := range b {
			i := b[(start+j)%len(b)]
			if st := &s.states[i]; st.Available(s.clock, st.max) {
				return int(i)
			}
		}
	}
	return -1
}

// mostIdle: three quarters of the endpoints are idle.
func (o *lcBuckets) mostIdle() bool { return 4*len(o.buckets[0]) >= 3*len(o.set.states) }

type wlcPicker struct {
	loadIndex
	order wlcHeap
}

func (p *wlcPicker) Pick(Request) (*Endpoint, error) {
	s := p.set
	if len(s.states) == 0 {
		return nil, ErrNoEndpoint
	}
	if !p.watching.Load() {
		// An idle endpoint of the largest weight is a least loaded one.
		// (least_conn's draws, over these: each policy draws in its own
		// Pick, as a call of a draw both shared cost least_conn's
		// picker 1.1-1.2x.)
		heavy := p.order.heavy
		for range lcDraws {
			i := heavy[intn(s.rand, len(heavy))]
			if st := &s.states[i]; st.Inflight() == 0 && st.Available(s.clock, st.max) {
				return s.endpoints[i], nil
			}
		}
	}
	return p.pick(true)
}

// wlcFrontier bounds the search past unavailable endpoints at the heap's
// top: when more than this many of the least loaded are unavailable, a
// pick scans every endpoint instead.
const wlcFrontier = 32

// wlcHeap is weighted_least_conn's order: a binary heap of endpoints, the
// least (in-flight + 1) / weight on top, equal ones in the order they came
// to that load.
type wlcHeap struct {
	set   *Set
	heavy []int32 // the endpoints of the largest weight, whom draws try
	top   int64   // the largest weight

	heap      []int32  // endpoints
	pos       []int32  // each endpoint's place in heap, -1 when out
	load      []int64  // its in-flight count + 1 when it was placed
	came      []uint64 // when it came to that load: ties go in turn
	clock     uint64   // counts places, for came
	idleHeavy int      // heavy endpoints in the heap with none in flight
}

func (o *wlcHeap) reset() {
	n := len(o.set.states)
	if o.pos == nil {
		o.heap, o.pos, o.load, o.came = make([]int32, 0, n), make([]int32, n), make([]int64, n), make([]uint64, n)
	}
	o.heap = o.heap[:0]
	for i := range o.pos {
		o.pos[i] = -1
	}
	o.idleHeavy = 0
}

// less orders endpoints a and b: load/weight, cross-multiplied to stay in
// integers, then the one that came to its load first.
func (o *wlcHeap) less(a, b int32) bool {
	la, lb := o.load[a]*o.set.states[b].weight, o.load[b]*o.set.states[a].weight
	return la < lb || la == lb && o.came[a] < o.came[b]
}

func (o *wlcHeap) place(i int) {
	l := max(o.set.states[i].Inflight(), 0) + 1
	at := o.pos[i]
	if at >= 0 && o.load[i] == l {
		return
	}
	if o.set.states[i].weight == o.top {
		if at >= 0 && o.load[i] == 1 {
			o.idleHeavy--
		}
		if l == 1 {
			o.idleHeavy++
		}
	}
	o.load[i], o.came[i] = l, o.clock
	o.clock++
	if at < 0 {
		at = int32(len(o.heap))
		o.heap = append(o.heap, int32(i))
		o.pos[i] = at
		o.up(at)
		return
	}
	// Its key only rose (more in flight) or only fell (fewer; a later
	// arrival breaks no tie it did not break before).
	if !o.up(at) {
		o.down(at)
	}
}

// up moves the endpoint at heap place k up while it is less than its
// parent; it reports whether it moved.
func (o *wlcHeap) up(k int32) bool {
	h, start := o.heap, k
	e := h[k]
	for k > 0 {
		parent := (k - 1) / 2
		if !o.less(e, h[parent]) {
			break
		}
		h[k] = h[parent]
		o.pos[h[k]] = k
		k = parent
	}
	h[k] = e
	o.pos[e] = k
	return k != start
}

// down moves the endpoint at heap place k down while a child is less.
func (o *wlcHeap) down(k int32) {
	h := o.heap
	n := int32(len(h))
	e := h[k]
	for {
		c := 2*k + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && o.less(h[r], h[c]) {
			c = r
		}
		if !o.less(h[c], e) {
			break
		}
		h[k] = h[c]
		o.pos[h[k]] = k
		k = c
	}
	h[k] = e
	o.pos[e] = k
}

// least returns the heap's top, or when that is unavailable the least of
// those below it that is: a search in order from the top (a frontier of
// the places whose parents were stepped over), which scans every endpoint
// once more than wlcFrontier were stepped over.
func (o *wlcHeap) least() int {
	s, h := o.set, o.heap
	if len(h) == 0 {
		return -1
	}
	if st := &s.states[h[0]]; st.Available(s.clock, st.max) {
		return int(h[0])
	}
	var buf [2*wlcFrontier + 2]int32
	frontier := buf[:0]
	n := int32(len(h))
	for k, steps := int32(0), 0; ; steps++ {
		// k was stepped over: its children join the frontier.
		for c := 2*k + 1; c <= 2*k+2 && c < n; c++ {
			frontier = append(frontier, c)
		}
		if len(frontier) == 0 {
			return -1 // none is available
		}
		if steps == wlcFrontier {
			return scanLeast(s, nil, true)
		}
		best := 0
		for j := 1; j < len(frontier); j++ {
			if o.less(h[frontier[j]], h[frontier[best]]) {
				best = j
			}
		}
		k = frontier[best]
		frontier[best] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		if st := &s.states[h[k]]; st.Available(s.clock, st.max) {
			return int(h[k])
		}
	}
}

// mostIdle: three quarters of the heaviest endpoints are idle.
func (o *wlcHeap) mostIdle() bool { return 4*o.idleHeavy >= 3*len(o.heavy) }

// scanLeast returns the available endpoint with the fewest requests in
// flight among idx (every endpoint when idx is nil), per weight when
// weighted ((in flight + 1) / weight), the first met from a random start
// on a tie; -1 if none is available. Unweighted, it stops at the first
// idle endpoint, which nothing can beat.
func scanLeast(s *Set, idx []int32, weighted bool) int {
	n := len(s.states)
	if idx != nil {
		n = len(idx)
	}
	if n == 0 {
		return -1
	}
	// bestLoad/bestWeight: best's in flight + 1, and its weight (1
	// unweighted).
	best, bestLoad, bestWeight := -1, int64(0), int64(1)
	for k, j := 0, intn(s.rand, n); k < n; k++ {
		i := j
		if idx != nil {
			i = int(idx[j])
		}
		if st := &s.states[i]; st.Available(s.clock, st.max) {
			load, w := st.Inflight()+1, int64(1)
			if weighted {
				w = st.weight
			} else if load == 1 {
				return i
			}
			// load/w < bestLoad/bestWeight, cross-multiplied to stay in
			// integers.
			if best < 0 || load*bestWeight < bestLoad*w {
				best, bestLoad, bestWeight = i, load, w
			}
		}
		if j++; j == n {
			j = 0
		}
	}
	return best
}

// endpointAt is the endpoint at i, or ErrNoEndpoint for -1.
func endpointAt(s *Set, i int) (*Endpoint, error) {
	if i < 0 {
		return nil, ErrNoEndpoint
	}
	return s.endpoints[i], nil
}
