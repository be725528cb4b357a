package balance

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"time"

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
// The table is sharded by the key's hash, each shard bounded, forgetting
// its least recently seen key when full (see shard). A hit takes no lock;
// expired keys are dropped as they are met (replaced, or found at the old
// end when a key is added), never by a sweep.
type Sticky struct {
	opts   StickyOptions        // immutable after NewSticky
	shards [stickyShards]*shard // table mode
	share  StickyShare          // set before first use; nil: this process alone
	// seed keys the table's hash: the table lives in this process alone,
	// so its hash need not be stable, and a seed no client knows keeps
	// clients from choosing keys that all land in one place.
	seed maphash.Seed

	// hits counts hash mode's; the table's are counted by shard, on a
	// word the keys of one shard share rather than one every core writes.
	pinned, hits, repinned, broken, rejected, unkeyed, evicted, adopted atomic.Int64
}

const stickyShards = 32

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
	s := &Sticky{opts: opts, seed: maphash.MakeSeed()}
	if !opts.Hash {
		per := (opts.MaxEntries + stickyShards - 1) / stickyShards
		for i := range s.shards {
			s.shards[i] = newShard(per)
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
	if st.opts.Hash {
		p.hrw, _ = placement.NewRendezvous(s.nodes()) // unique names and weights >= 1: accepted
	}
	if obs, ok := p.inner.(Observer); ok {
		return stickyObserver{p, obs}
	}
	return p
}

type stickyPicker struct {
	policy *Sticky
	set    *Set
	inner  Picker
	hrw    *placement.Rendezvous // hash mode
	ok     func(string) bool     // set.availableNamed
}

// stickyObserver is a sticky picker over an inner picker that keeps
// accounts of its own (scored's): the end of every request is passed on
// to it. Over one that keeps none (least_conn, the default) the sticky
// picker is no Observer, so that the end of a request does not call it
// for nothing.
type stickyObserver struct {
	*stickyPicker
	inner Observer
}

// Done tells the inner picker.
func (p stickyObserver) Done(ep *Endpoint) { p.inner.Done(ep) }

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
	now, ttl := p.set.now(r.At), int64(st.opts.TTL)
	h := maphash.String(st.seed, r.Key)
	sh := st.shards[h%stickyShards]
	pn := sh.get(h, r.Key, now)
	if pn != nil {
		i := pn.in(p.set)
		switch {
		case i >= 0 && p.set.states[i].Available(p.set.clock, p.set.states[i].max):
			sh.seen(pn, now, ttl)
			sh.hits.Add(1)
			if st.share != nil {
				if t := pn.touched.Load(); now-t > ttl/4 && pn.touched.CompareAndSwap(t, now) {
					st.share.Touch(r.Key, pn.name, st.opts.TTL)
				}
			}
			return p.set.endpoints[i], nil
		case i >= 0 && p.onlyFull(p.set.endpoints[i]):
			if st.opts.OnFull == Reject {
				st.rejected.Add(1)
				return nil, ErrRejected
			}
			st.broken.Add(1)
			return p.inner.Pick(r)
		}
	}
	// New key, or its endpoint left: place it and pin it there. Two first
	// requests of one key racing here both pin, and the later pin wins.
	ep, err := p.inner.Pick(r)
	if err != nil {
		return nil, err
	}
	if st.share != nil {
		ep = p.claim(r.Key, ep)
	}
	// The pin keeps a copy of the key: a key cut from a request's head
	// would keep the head's bytes, and those of the heads beside it, for
	// as long as the pin lives.
	if sh.put(h, strings.Clone(r.Key), ep.Name, now, ttl) {
		st.evicted.Add(1)
	}
	if pn != nil {
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
		s.Entries += sh.len()
		s.Hits += sh.hits.Load()
	}
	return s
}
