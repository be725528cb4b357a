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
	p := &lcPicker{set: s, watches: make([]health.Watch, len(s.states)), idleMoves: 2*len(s.states) + 64}
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

// lcDraws is how many endpoints a pick draws looking for an idle one
// while the index is not kept: with three quarters idle, all four draws
// miss one pick in 256.
const lcDraws = 4

type lcPicker struct {
	set       *Set
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
	moves    int       // since the last pick
	picks    int       // since the index was built
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
	p.low, p.moves, p.picks = 0, 0, 0
	p.watching.Store(true)
	for i := range p.set.states {
		if !p.set.states[i].SetWatch(&p.watches[i]) {
			p.scan = true // a picker built later keeps these states
		}
		p.level[i] = -1
		p.place(i)
	}
}

// unwatch removes the watches: the index is no longer kept. Called with
// mu held.
func (p *lcPicker) unwatch() {
	p.watching.Store(false)
	for i := range p.set.states {
		p.set.states[i].ClearWatch(&p.watches[i])
	}
}

// retire stops keeping the index: the snapshot was replaced. Picks that
// still come (requests that took the old snapshot) scan.
func (p *lcPicker) retire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scan = true
	p.unwatch()
}

// moved is endpoint i's watch: its in-flight count changed. Watches are
// installed by watch, under mu, after the buckets are made.
func (p *lcPicker) moved(i int) {
	p.mu.Lock()
	if !p.scan && p.watching.Load() {
		p.place(i)
		if p.moves++; p.moves > p.idleMoves {
			p.unwatch() // seldom asked: cheaper to build again
		}
	}
	p.mu.Unlock()
}

// place moves endpoint i to the bucket of its in-flight count now. Every
// change is followed by a place that reads the count after it, so the
// last one leaves the endpoint where it belongs. Called with mu held.
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
	p.mu.Lock()
	if !p.scan && !p.watching.Load() {
		p.watch()
	}
	if p.scan {
		p.mu.Unlock()
		return endpointAt(s, scanLeast(s, nil, false))
	}
	p.moves = 0
	i := p.least()
	if p.picks++; p.picks >= 2*n && 4*len(p.buckets[0]) >= 3*n {
		p.unwatch() // most are idle again: draws find them
	}
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
