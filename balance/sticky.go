package balance

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/placement"
)

// DefaultStickyTTL is how long a sticky table keeps a key that is not seen
// again.
const DefaultStickyTTL = 30 * time.Minute

// DefaultStickyEntries is the most keys a sticky table holds when
// StickyOptions.MaxEntries is zero: keys are chosen by clients, so the
// table is bounded, and a full table forgets its least recently used key.
const DefaultStickyEntries = 100_000

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
	// MaxEntries bounds the table: when it is full, a new key evicts the
	// least recently seen one (which is then placed afresh if it comes
	// back). Zero means DefaultStickyEntries.
	MaxEntries int
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
//
// The table is sharded, each shard a bounded LRU under its own lock: a
// pick costs one map lookup, and expired keys are dropped as they are met
// (looked up, or found oldest when a key is added), never by a sweep.
type Sticky struct {
	opts   StickyOptions        // immutable after NewSticky
	shards [stickyShards]*shard // table mode
	share  StickyShare          // set before first use; nil: this process alone

	// hits counts hash mode's; the table's are counted by shard.
	pinned, hits, repinned, broken, rejected, unkeyed, evicted, adopted atomic.Int64
}

const stickyShards = 32

type shard struct {
	mu   sync.Mutex
	pins *simplelru.LRU[string, *pin] // guarded by mu; a hit's pin is renewed in place
	// hits counts the table's hits in this shard, under mu, which a hit
	// holds anyway: a counter of the policy's would be one more atomic
	// write a pick, on a word every core shares.
	hits int64
}

type pin struct {
	name    string
	expires int64 // unix ns
	touched int64 // unix ns the shared pin was last kept alive
	// The endpoint's index in the set with id set: the table outlives
	// sets (reloads), so a pin names its endpoint, and keeps where the
	// name was last found so that a hit need not look it up.
	set uint64
	at  int32
}

// in returns the pinned endpoint in s, nil if s has none of that name.
// Called with the shard's lock held: it caches where it found it.
func (pn *pin) in(s *Set) *Endpoint {
	if pn.set != s.id {
		i, ok := s.byName[pn.name]
		if !ok {
			return nil
		}
		pn.set, pn.at = s.id, int32(i)
	}
	return s.endpoints[pn.at]
}

// StickyShare is a sticky table several instances share (a Redis store):
// a key pinned through one lands on the same endpoint through the others.
type StickyShare interface {
	// Claim pins key to name, unless another instance pinned it first
	// (or, with replace, in any case), and returns the pin in force. It
	// may wait on the network, boundedly; on an error the instance
	// decides alone.
	Claim(key, name string, ttl time.Duration, replace bool) (string, error)
	// Touch keeps key's pin alive for ttl, without waiting.
	Touch(key, name string, ttl time.Duration)
}

// ShareWith makes the table shared: a key new to this instance is claimed
// in the shared table (the pin another instance made wins), and pins in
// use are kept alive there. Call it before the policy is first used.
func (st *Sticky) ShareWith(s StickyShare) { st.share = s }

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
	if opts.MaxEntries == 0 {
		opts.MaxEntries = DefaultStickyEntries
	}
	if opts.MaxEntries < 0 {
		return nil, fmt.Errorf("max_entries: must be positive (got %d)", opts.MaxEntries)
	}
	if opts.Inner == nil {
		opts.Inner = LeastConn{}
	}
	if k, ok := opts.Inner.(*Keyed); ok && k.loads != nil {
		// Bounded loads count a request from its pick to its Done; a
		// sticky pick that its table or its hash made never took the
		// unit its Done would give back, and the loads would count low.
		return nil, fmt.Errorf("inner: bounded counts the requests it places until they end, and most of a sticky policy's picks are its own: choose another inner policy")
	}
	s := &Sticky{opts: opts}
	if !opts.Hash {
		per := (opts.MaxEntries + stickyShards - 1) / stickyShards
		for i := range s.shards {
			lru, err := simplelru.NewLRU[string, *pin](per, nil)
			if err != nil {
				return nil, err
			}
			s.shards[i] = &shard{pins: lru}
		}
	}
	return s, nil
}

// Name returns "sticky".
func (*Sticky) Name() string { return "sticky" }

// Build returns a picker over s. The table outlives it: pins to endpoints
// that stay are kept. In hash mode the picker has a placer of its own, so
// the running one is never changed by a build.
func (st *Sticky) Build(s *Set) Picker {
	p := &stickyPicker{policy: st, set: s, inner: st.opts.Inner.Build(s), ok: s.availableNamed}
	p.innerObs, _ = p.inner.(Observer)
	if st.opts.Hash {
		p.hrw, _ = placement.NewRendezvous(s.nodes()) // unique names and weights >= 1: accepted
	}
	return p
}

type stickyPicker struct {
	policy   *Sticky
	set      *Set
	inner    Picker
	innerObs Observer
	hrw      *placement.Rendezvous // hash mode
	ok       func(string) bool     // set.availableNamed
}

// onlyFull reports that ep is unavailable only because it is full: it is
// still there and well, so the key's affinity is worth keeping.
func (p *stickyPicker) onlyFull(ep *Endpoint) bool {
	return ep.Full() && !ep.State.Draining() && !ep.State.Down() &&
		ep.State.Breaker(p.set.clock.Now()) != health.Open
}

func (p *stickyPicker) Pick(r Request) (*Endpoint, error) {
	st := p.policy
	if r.Key == "" {
		st.unkeyed.Add(1)
		return p.inner.Pick(r)
	}
	if p.hrw != nil {
		return p.pickHash(r)
	}
	return p.pickTable(r)
}

func (p *stickyPicker) pickHash(r Request) (*Endpoint, error) {
	st := p.policy
	owner, err := p.hrw.Owner(r.Key)
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
	return walkOwners(p.set, p.hrw, r.Key, p.ok)
}

func (p *stickyPicker) pickTable(r Request) (*Endpoint, error) {
	st := p.policy
	now := p.set.now(r.At)
	sh := st.shards[xxhash.Sum64String(r.Key)%stickyShards]
	sh.mu.Lock()
	pn, found := sh.pins.Get(r.Key)
	if found && pn.expires <= now {
		sh.pins.Remove(r.Key)
		found = false
	}
	if found {
		ep := pn.in(p.set)
		switch {
		case ep != nil && p.set.Available(ep):
			touch := st.share != nil && now-pn.touched > int64(st.opts.TTL)/4
			if touch {
				pn.touched = now
			}
			pn.expires = now + int64(st.opts.TTL) // Get made it the most recent
			sh.hits++
			sh.mu.Unlock()
			if touch {
				st.share.Touch(r.Key, pn.name, st.opts.TTL)
			}
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
	if st.share != nil {
		ep = p.claim(r.Key, ep)
	}
	sh.mu.Lock()
	if sh.pins.Add(r.Key, &pin{name: ep.Name, expires: now + int64(st.opts.TTL), touched: now}) {
		st.evicted.Add(1)
	}
	// Drop expired keys met at the old end: at most two, so a pick's cost
	// stays constant, and more than one per insert keeps up with inserts.
	for range 2 {
		if _, old, ok := sh.pins.GetOldest(); !ok || old.expires > now {
			break
		}
		sh.pins.RemoveOldest()
	}
	sh.mu.Unlock()
	if found {
		st.repinned.Add(1)
	} else {
		st.pinned.Add(1)
	}
	return ep, nil
}

// claim asks the shared table where key goes, offering ep: the pin
// another instance made wins while its endpoint is available here; one
// whose endpoint is not is replaced by ep. Without an answer, ep.
func (p *stickyPicker) claim(key string, ep *Endpoint) *Endpoint {
	st := p.policy
	owner, err := st.share.Claim(key, ep.Name, st.opts.TTL, false)
	if err != nil || owner == ep.Name {
		return ep
	}
	if o := p.set.Get(owner); o != nil && p.set.Available(o) {
		st.adopted.Add(1)
		return o
	}
	_, _ = st.share.Claim(key, ep.Name, st.opts.TTL, true)
	return ep
}

// retire forwards to the inner picker when it keeps something up to date
// (least_conn's index).
func (p *stickyPicker) retire() {
	if r, ok := p.inner.(retirer); ok {
		r.retire()
	}
}

// Done forwards to the inner picker when it keeps accounts of its own.
func (p *stickyPicker) Done(ep *Endpoint) {
	if p.innerObs != nil {
		p.innerObs.Done(ep)
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
	Evicted  int64 `json:"evicted"`  // keys forgotten as the table was full
	Adopted  int64 `json:"adopted"`  // keys new here, sent where another instance pinned them (shared table)
	Entries  int   `json:"entries"`  // keys in the table (table mode)
}

// Stats returns the counters.
func (st *Sticky) Stats() StickyStats {
	s := StickyStats{
		Pinned: st.pinned.Load(), Hits: st.hits.Load(), Repinned: st.repinned.Load(),
		Broken: st.broken.Load(), Rejected: st.rejected.Load(), Unkeyed: st.unkeyed.Load(), Evicted: st.evicted.Load(),
		Adopted: st.adopted.Load(),
	}
	for _, sh := range st.shards {
		if sh == nil {
			continue // hash mode
		}
		sh.mu.Lock()
		s.Entries += sh.pins.Len()
		s.Hits += sh.hits
		sh.mu.Unlock()
	}
	return s
}
