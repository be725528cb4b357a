package balance

import (
	"sync"
	"sync/atomic"
)

// shard is one part of a sticky table: the pins of the keys whose hash
// falls in it, at most max of them.
//
// A hit, by far the most common pick, takes no lock: the pins are found
// through an open-addressing array of atomic pointers, read as it is. The
// pins are also in a list, least recently seen first, which says which
// to forget when the shard is full and where expired ones are; a hit
// moves its pin to the list's new end, under the lock, only when its
// last move is more than a 64th of the TTL old (memcached bumps an item
// at most once a minute for the same reason). Everything else that
// changes the pins (a new key, a pin replaced, expired or evicted)
// happens under mu too. Under a lock on every hit, as in a plain LRU, a
// hit would serialise a shard's requests and cost a third of a sticky
// pick.
type shard struct {
	slots atomic.Pointer[[]atomic.Pointer[pin]] // a power of two, never full
	hits  atomic.Int64

	mu     sync.Mutex
	max    int // pins at most
	live   int // pins in slots
	dead   int // slots holding tombstone
	oldest *pin
	newest *pin
}

// pin is a key's place in the table. key, hash and name never change;
// the rest is atomic, or guarded by the shard's lock.
type pin struct {
	key  string
	hash uint64
	name string

	expires atomic.Int64 // unix ns: seen last + TTL, to a 64th of the TTL
	touched atomic.Int64 // unix ns the shared pin was last kept alive
	// where: the endpoint's index in the set it was last found in, as
	// that set's id (low 40 bits) << 24 | index; 0 before. The table
	// outlives sets (reloads), so a pin names its endpoint and keeps where
	// the name was found, so that a hit need not look it up.
	where atomic.Uint64

	// Guarded by the shard's lock.
	prev, next *pin // toward oldest, toward newest
	gone       bool // taken out of the shard
}

// tombstone fills the slot of a pin taken out, so that a search for a
// key placed after it goes on past it.
var tombstone = &pin{}

const whereIndexBits = 24

// in returns the pinned endpoint's index in s, -1 if s has none of that
// name.
func (pn *pin) in(s *Set) int {
	if w := pn.where.Load(); w != 0 && w>>whereIndexBits == s.id&(1<<(64-whereIndexBits)-1) {
		return int(w & (1<<whereIndexBits - 1))
	}
	i, ok := s.byName[pn.name]
	if !ok {
		return -1
	}
	if i < 1<<whereIndexBits {
		pn.where.Store(s.id<<whereIndexBits | uint64(i))
	}
	return i
}

func newShard(max int) *shard {
	sh := &shard{max: max}
	slots := make([]atomic.Pointer[pin], 8)
	sh.slots.Store(&slots)
	return sh
}

// home is where a search for hash starts in a table of n slots: the bits
// above those that chose the shard.
func home(hash uint64, n int) int { return int(hash>>8) & (n - 1) }

// get returns key's pin if it has one that has not expired at now.
// It takes no lock.
func (sh *shard) get(hash uint64, key string, now int64) *pin {
	if pn := sh.find(hash, key); pn != nil && pn.expires.Load() > now {
		return pn
	}
	return nil
}

// find returns key's pin, expired or not. It reads the slots as they are,
// with or without mu: a put under way may or may not be seen.
func (sh *shard) find(hash uint64, key string) *pin {
	slots := *sh.slots.Load()
	for i := home(hash, len(slots)); ; i = (i + 1) & (len(slots) - 1) {
		pn := slots[i].Load()
		if pn == nil {
			return nil
		}
		if pn.hash == hash && pn.key == key && pn != tombstone {
			return pn
		}
	}
}

// seen marks pn seen at now: its expiry moves on and it goes to the
// list's new end, unless that was done less than a 64th of ttl ago (the
// common case, which this inlined test keeps to a load and a compare).
func (sh *shard) seen(pn *pin, now, ttl int64) {
	if now+ttl-pn.expires.Load() > ttl/64 {
		sh.renew(pn, now, ttl)
	}
}

func (sh *shard) renew(pn *pin, now, ttl int64) {
	old := pn.expires.Load()
	if now+ttl-old <= ttl/64 || !pn.expires.CompareAndSwap(old, now+ttl) {
		return // another hit renewed it
	}
	sh.mu.Lock()
	if !pn.gone {
		sh.unlink(pn)
		sh.link(pn)
	}
	sh.mu.Unlock()
}

// put pins key to name at now, in place of any pin the key had, and
// reports whether a pin of another key was evicted to make room. It also
// drops a few expired pins at the list's old end, so that a pick's cost
// stays constant and more than one a put keeps up with the puts.
func (sh *shard) put(hash uint64, key, name string, now, ttl int64) (evicted bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := sh.find(hash, key); old != nil {
		sh.remove(old)
	}
	if sh.live >= sh.max {
		sh.remove(sh.oldest) // the least recently seen
		evicted = true
	}
	pn := &pin{key: key, hash: hash, name: name}
	pn.expires.Store(now + ttl)
	pn.touched.Store(now)
	sh.insert(pn)
	for range 2 {
		if o := sh.oldest; o != pn && o.expires.Load() <= now {
			sh.remove(o)
		}
	}
	return evicted
}

// insert adds pn, whose key has no pin, to the slots and the list's new
// end. Called with mu held.
func (sh *shard) insert(pn *pin) {
	slots := *sh.slots.Load()
	if (sh.live+sh.dead+1)*2 > len(slots) {
		slots = sh.rebuild()
	}
	for i := home(pn.hash, len(slots)); ; i = (i + 1) & (len(slots) - 1) {
		if s := slots[i].Load(); s == nil || s == tombstone {
			if s == tombstone {
				sh.dead--
			}
			slots[i].Store(pn)
			break
		}
	}
	sh.live++
	sh.link(pn)
}

// rebuild makes new slots for the live pins, without tombstones, twice
// as many when a quarter of them are live, and publishes them: a get
// still searching the old ones finds what they held. At most half the
// slots are ever taken (pins and tombstones), so that a search seldom
// goes past its first slot or two. Called with mu held.
func (sh *shard) rebuild() []atomic.Pointer[pin] {
	n := len(*sh.slots.Load())
	if (sh.live+1)*4 > n {
		n *= 2
	}
	slots := make([]atomic.Pointer[pin], n)
	for pn := sh.oldest; pn != nil; pn = pn.next {
		for i := home(pn.hash, n); ; i = (i + 1) & (n - 1) {
			if slots[i].Load() == nil {
				slots[i].Store(pn)
				break
			}
		}
	}
	sh.dead = 0
	sh.slots.Store(&slots)
	return slots
}

// remove takes pn out of the slots and the list. Called with mu held.
func (sh *shard) remove(pn *pin) {
	slots := *sh.slots.Load()
	for i := home(pn.hash, len(slots)); ; i = (i + 1) & (len(slots) - 1) {
		if slots[i].Load() == pn {
			slots[i].Store(tombstone)
			break
		}
	}
	sh.live--
	sh.dead++
	sh.unlink(pn)
	pn.gone = true
}

func (sh *shard) link(pn *pin) {
	pn.prev, pn.next = sh.newest, nil
	if sh.newest != nil {
		sh.newest.next = pn
	} else {
		sh.oldest = pn
	}
	sh.newest = pn
}

func (sh *shard) unlink(pn *pin) {
	if pn.prev != nil {
		pn.prev.next = pn.next
	} else {
		sh.oldest = pn.next
	}
	if pn.next != nil {
		pn.next.prev = pn.prev
	} else {
		sh.newest = pn.prev
	}
	pn.prev, pn.next = nil, nil
}

// len returns the pins held, expired ones included until they are met.
func (sh *shard) len() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.live
}
