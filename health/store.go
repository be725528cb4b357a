package health

import (
	"slices"
	"sync"
)

// Store keeps endpoint health by name, so that it outlives the snapshots
// and config reloads that come and go around it: an endpoint that stays in
// the config keeps its estimates, in-flight count and breaker.
//
// States are reference-counted (as Caddy keeps its upstream hosts): each
// snapshot that holds an endpoint acquires its state and releases it when
// it is retired or abandoned. A state lives while any snapshot holds it, so
// a snapshot built beside a running one shares the running one's states,
// and abandoning it forgets only what it alone created.
type Store interface {
	// Acquire returns the named state, creating it the first time, and
	// counts one holder more. created reports that this call made it.
	Acquire(name string) (st *State, created bool)
	// Release counts one holder less; the state is forgotten when none
	// is left, and a later Acquire starts afresh.
	Release(name string)
	// Names lists the names held, sorted.
	Names() []string
}

// MemoryStore is a Store in this process's memory.
type MemoryStore struct {
	mu     sync.Mutex
	states map[string]*held // guarded by mu
}

type held struct {
	st   *State
	refs int
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{states: map[string]*held{}} }

// Acquire returns the named state, creating it on first use, and counts
// one holder more.
func (m *MemoryStore) Acquire(name string) (*State, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.states[name]; ok {
		h.refs++
		return h.st, false
	}
	h := &held{st: NewState(name), refs: 1}
	m.states[name] = h
	return h.st, true
}

// Release counts one holder less and forgets the state after the last.
func (m *MemoryStore) Release(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.states[name]; ok {
		if h.refs--; h.refs <= 0 {
			delete(m.states, name)
		}
	}
}

// Names lists the names held, sorted.
func (m *MemoryStore) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.states))
	for n := range m.states {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Each calls f with every state held, in no order, under the store's lock:
// f must be quick and must not call the store.
func (m *MemoryStore) Each(f func(name string, st *State)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, h := range m.states {
		f(name, h.st)
	}
}
