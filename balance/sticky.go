package balance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/placement"
)

// DefaultStickyTTL is how long a sticky table keeps a key that is not seen
// again.
const DefaultStickyTTL = 30 * time.Minute

// OnFull says what a sticky policy does when a key's endpoint is full (at
// its in-flight cap) but otherwise well.
type OnFull int

const (
	// BreakAffinity sends this request elsewhere and keeps the pin.
	BreakAffinity OnFull = iota
	// Reject refuses the request (the proxies answer 503), keeping the
	// affinity strict.
	Reject
)

// StickyOptions configure a Sticky policy.
type StickyOptions struct {
	// Hash places keys with rendezvous hashing instead of a table: no state
	// to keep or share, at the price of control (a heavy key is one hot
	// endpoint, and a key whose endpoint leaves goes where the hash says).
	Hash bool
	// TTL is how long a table entry lives after its key was last seen.
	// Zero means DefaultStickyTTL.
	TTL time.Duration
	// OnFull is what happens when the pinned endpoint is full.
	OnFull OnFull
	// Inner places keys seen for the first time, keys whose endpoint left,
	// and requests with no key. Nil means least_conn.
	Inner Policy
}

// Sticky keeps each key on the same endpoint: session affinity. Two ways
// (article 000): a table from key to endpoint, filled the first time a key
// is seen (exact control, but state), or a hash of the key (no state).
// Either way it decides what happens when the pinned endpoint goes away
// (draining, down, breaker open, or gone from the config: the key is pinned
// again elsewhere) and when it is full (OnFull: break affinity for this
// request, or reject it). Each case is counted.
type Sticky struct {
	opts   StickyOptions         // immutable after NewSticky
	shards [stickyShards]*shard  // table mode
	hrw    *placement.Rendezvous // hash mode

	pinned, hits, repinned, broken, rejected, unkeyed atomic.Int64
}

const stickyShards = 32

type shard struct {
	mu      sync.Mutex
	pins    map[string]pin // guarded by mu
	inserts int            // guarded by mu; sweeps every 256
}

type pin struct {
	name    string
	expires int64 // unix ns
}

var _ Policy = (*Sticky)(nil)

// NewSticky returns a sticky policy.
func NewSticky(opts StickyOptions) (*Sticky, error) {
	if opts.TTL == 0 {
		opts.TTL = DefaultStickyTTL
	}
	if opts.TTL < 0 {
		return nil, fmt.Errorf("ttl: must be positive (got %v)", opts.TTL)
	}
	if opts.OnFull != BreakAffinity && opts.OnFull != Reject {
		return nil, fmt.Errorf("on_full: must be break or reject")
	}
	if opts.Inner == nil {
		opts.Inner = LeastConn{}
	}
	s := &Sticky{opts: opts}
	if opts.Hash {
		s.hrw, _ = placement.NewRendezvous(nil)
	}
	for i := range s.shards {
		s.shards[i] = &shard{pins: map[string]pin{}}
	}
	return s, nil
}

// Name returns "sticky".
func (*Sticky) Name() string { return "sticky" }

// Build returns a picker over s. The table outlives it: pins to endpoints
// that stay are kept.
func (st *Sticky) Build(s *Set) Picker {
	p := &stickyPicker{policy: st, set: s, inner: st.opts.Inner.Build(s), ok: s.availableNamed}
	p.innerObs, _ = p.inner.(Observer)
	if st.hrw != nil {
		_ = st.hrw.Set(s.nodes()) // unique names and weights >= 1: accepted
	}
	return p
}

type stickyPicker struct {
	policy   *Sticky
	set      *Set
	inner    Picker
	innerObs Observer
	ok       func(string) bool // set.availableNamed
}

// onlyFull reports that ep is unavailable only because it is full: it is
// still there and well, so the key's affinity is worth keeping.
func (p *stickyPicker) onlyFull(ep *Endpoint) bool {
	return ep.State.Full() && !ep.State.Draining() && !ep.State.Down() &&
		ep.State.Breaker(p.set.clock.Now()) != health.Open
}

func (p *stickyPicker) Pick(r Request) (*Endpoint, error) {
	st := p.policy
	if r.Key == "" {
		st.unkeyed.Add(1)
		return p.inner.Pick(r)
	}
	if st.hrw != nil {
		return p.pickHash(r)
	}
	return p.pickTable(r)
}

func (p *stickyPicker) pickHash(r Request) (*Endpoint, error) {
	st := p.policy
	owner, err := st.hrw.Owner(r.Key)
	if err != nil {
		return nil, ErrNoEndpoint
	}
	ep := p.set.Get(owner)
	switch {
	case ep != nil && p.set.Available(ep):
		st.hits.Add(1)
		return ep, nil
	case ep != nil && p.onlyFull(ep):
		if st.opts.OnFull == Reject {
			st.rejected.Add(1)
			return nil, ErrRejected
		}
		st.broken.Add(1)
	default:
		st.repinned.Add(1)
	}
	return walkOwners(p.set, st.hrw, r.Key, p.ok)
}

func (p *stickyPicker) pickTable(r Request) (*Endpoint, error) {
	st := p.policy
	now := p.set.clock.Now().UnixNano()
	sh := st.shards[xxhash.Sum64String(r.Key)%stickyShards]
	sh.mu.Lock()
	pn, found := sh.pins[r.Key]
	if found && pn.expires <= now {
		found = false
	}
	if found {
		ep := p.set.Get(pn.name)
		switch {
		case ep != nil && p.set.Available(ep):
			sh.pins[r.Key] = pin{name: pn.name, expires: now + int64(st.opts.TTL)}
			sh.mu.Unlock()
			st.hits.Add(1)
			return ep, nil
		case ep != nil && p.onlyFull(ep):
			sh.mu.Unlock()
			if st.opts.OnFull == Reject {
				st.rejected.Add(1)
				return nil, ErrRejected
			}
			st.broken.Add(1)
			return p.inner.Pick(r)
		}
	}
	sh.mu.Unlock()
	// New key, or its endpoint left: place it and pin it there. The inner
	// pick runs outside the shard lock; two first requests of one key
	// racing here both pin, and the later pin wins.
	ep, err := p.inner.Pick(r)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	sh.pins[r.Key] = pin{name: ep.Name, expires: now + int64(st.opts.TTL)}
	if sh.inserts++; sh.inserts%256 == 0 {
		for k, v := range sh.pins {
			if v.expires <= now {
				delete(sh.pins, k)
			}
		}
	}
	sh.mu.Unlock()
	if found {
		st.repinned.Add(1)
	} else {
		st.pinned.Add(1)
	}
	return ep, nil
}

// Done forwards to the inner picker when it keeps accounts of its own.
func (p *stickyPicker) Done(ep *Endpoint, v health.Verdict) {
	if p.innerObs != nil {
		p.innerObs.Done(ep, v)
	}
}

// StickyStats counts what a sticky policy did.
type StickyStats struct {
	Pinned   int64 `json:"pinned"`   // keys seen for the first time, pinned
	Hits     int64 `json:"hits"`     // requests sent to their key's endpoint
	Repinned int64 `json:"repinned"` // keys whose endpoint left, pinned elsewhere
	Broken   int64 `json:"broken"`   // requests sent elsewhere as their endpoint was full
	Rejected int64 `json:"rejected"` // requests refused as their endpoint was full
	Unkeyed  int64 `json:"unkeyed"`  // requests with no key
	Entries  int   `json:"entries"`  // keys in the table (table mode)
}

// Stats returns the counters.
func (st *Sticky) Stats() StickyStats {
	s := StickyStats{
		Pinned: st.pinned.Load(), Hits: st.hits.Load(), Repinned: st.repinned.Load(),
		Broken: st.broken.Load(), Rejected: st.rejected.Load(), Unkeyed: st.unkeyed.Load(),
	}
	for _, sh := range st.shards {
		sh.mu.Lock()
		s.Entries += len(sh.pins)
		sh.mu.Unlock()
	}
	return s
}
