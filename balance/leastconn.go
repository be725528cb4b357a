package balance

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/rotor-lb/rotor/health"
)

// LeastConn sends each request to the available endpoint with the fewest
// requests in flight; ties are broken at random, since always taking the
// first would pile every quiet-time request onto endpoint 0.
//
// The picker keeps its endpoints in buckets by in-flight count, moved as
// each request is admitted and released (the endpoints' health states
// tell it, through a health.Watch), so a pick looks in the lowest bucket
// instead of scanning every endpoint: O(1) expected while the least
// loaded endpoints are available, whatever the pool's size and load
// (HAProxy keeps its leastconn servers in a tree for the same reason).
// Unavailable endpoints stay in their bucket and are stepped over.
//
// An admit or a release does not take the picker's lock: it marks the
// endpoint in a bitmap (one atomic OR, and none when the mark is already
// there), and the next pick, under the lock it takes anyway, moves the
// marked endpoints to the buckets of their counts before it looks. A
// request costs the index four atomic operations (the pick's lock and
// unlock, the swap that takes the marks, the admit's mark) instead of
// a lock and unlock at each of pick, admit and release; and a picker
// that is seldom asked (sticky's, which places only keys it has not
// seen) pays a load for most moves, and its next pick catches up.
type LeastConn struct{}

var _ Policy = LeastConn{}

// Name returns "least_conn".
func (LeastConn) Name() string { return "least_conn" }

// Build returns a picker over s. It starts keeping its index at its first
// pick, so that a snapshot built beside the running one and never
// published changes nothing.
func (LeastConn) Build(s *Set) Picker {
	p := &lcPicker{set: s, watches: make([]health.Watch, len(s.states)), marks: make([]atomic.Uint64, (len(s.states)+63)/64)}
	seq := watchSeq.Add(1)
	for i := range p.watches {
		p.watches[i] = health.Watch{Seq: seq, Changed: func() { p.moved(i) }}
	}
	return p
}

// watchSeq orders the pickers that watch states: a later one takes over.
var watchSeq atomic.Uint64

// lcLevels bounds the buckets: endpoints with lcLevels-1 requests or more
// in flight share the last one, where the least loaded is searched for.
const lcLevels = 256

type lcPicker struct {
	set     *Set
	watches []health.Watch // one per endpoint
	// marks has bit i set when endpoint i's count changed since the
	// index last placed it. Written by the watches, without mu.
	marks []atomic.Uint64

	mu sync.Mutex
	// scan: the index is not kept, as the picker was retired (its
	// snapshot replaced) or a later picker watches the same states; a
	// pick scans every endpoint.
	scan bool
	// watching: the index is kept up to date; false before the first
	// pick.
	watching bool
	level    []int32   // each endpoint's bucket
	pos      []int32   // its place in the bucket
	buckets  [][]int32 // endpoints by in-flight count, up to lcLevels-1
	low      int       // no bucket below it holds an endpoint
}

// watch installs the watches and fills the buckets from the counts now.
// Called with mu held.
func (p *lcPicker) watch() {
	n := len(p.set.states)
	if p.level == nil {
		p.level, p.pos, p.buckets = make([]int32, n), make([]int32, n), make([][]int32, lcLevels)
	}
	for k := range p.buckets {
		p.buckets[k] = p.buckets[k][:0]
	}
	p.low, p.watching = 0, true
	for i := range p.set.states {
		if !p.set.states[i].SetWatch(&p.watches[i]) {
			p.scan = true // a picker built later keeps these states
		}
		p.level[i] = -1
		p.place(i)
	}
}

// retire stops keeping the index: the snapshot was replaced. Picks that
// still come (requests that took the old snapshot) scan.
func (p *lcPicker) retire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scan, p.watching = true, false
	for i := range p.set.states {
		p.set.states[i].ClearWatch(&p.watches[i])
	}
}

// moved is endpoint i's watch: its in-flight count changed. It marks the
// endpoint for the next pick to place; a mark already there is left
// without a write. Every change is followed by a mark seen set after it,
// and the pick takes the marks before it reads the counts, so a change
// is either read by the pick that takes its mark or marked again for
// the next.
func (p *lcPicker) moved(i int) {
	w, bit := &p.marks[i>>6], uint64(1)<<(i&63)
	if w.Load()&bit == 0 {
		w.Or(bit)
	}
}

// catchUp places every marked endpoint, taking the marks. Called with mu
// held, before a pick looks at the buckets.
func (p *lcPicker) catchUp() {
	for k := range p.marks {
		if p.marks[k].Load() == 0 {
			continue
		}
		for m := p.marks[k].Swap(0); m != 0; m &= m - 1 {
			p.place(k<<6 | bits.TrailingZeros64(m))
		}
	}
}

// place moves endpoint i to the bucket of its in-flight count now. Called
// with mu held.
func (p *lcPicker) place(i int) {
	k := int32(min(max(p.set.states[i].Inflight(), 0), lcLevels-1))
	old := p.level[i]
	if old == k {
		return
	}
	if old >= 0 {
		b := p.buckets[old]
		last := b[len(b)-1]
		b[p.pos[i]], p.pos[last] = last, p.pos[i]
		p.buckets[old] = b[:len(b)-1]
	}
	p.buckets[k] = append(p.buckets[k], int32(i))
	p.level[i], p.pos[i] = k, int32(len(p.buckets[k])-1)
	p.low = min(p.low, int(k))
}

func (p *lcPicker) Pick(Request) (*Endpoint, error) {
	s := p.set
	if len(s.states) == 0 {
		return nil, ErrNoEndpoint
	}
	p.mu.Lock()
	if !p.scan && !p.watching {
		p.watch()
	}
	if p.scan {
		p.mu.Unlock()
		return endpointAt(s, scanLeast(s, nil, false))
	}
	p.catchUp()
	i := p.least()
	p.mu.Unlock()
	return endpointAt(s, i)
}

// least returns an available endpoint of the lowest bucket that has one,
// at random within it, or -1. Called with mu held.
func (p *lcPicker) least() int {
	s := p.set
	for k := p.low; k < lcLevels; k++ {
		b := p.buckets[k]
		if len(b) == 0 {
			if k == p.low {
				p.low++
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
