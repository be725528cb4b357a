package health

import (
	"slices"
	"sync"
)

// Store keeps endpoint health by name, so that it outlives the snapshots
// and config reloads that come and go around it: an endpoint that stays in
// the config keeps its estimates, in-flight count and breaker.
type Store interface {
	// State returns the named endpoint's state, creating it with cfg the
	// first time. Later calls return the same *State and apply cfg to it.
	State(name string, cfg Config) *State
	// Forget drops the named state; a later State call starts afresh.
	Forget(name string)
	// Names lists the names held, sorted.
	Names() []string
}

// MemoryStore is a Store in this process's memory.
type MemoryStore struct {
	mu     sync.Mutex
	states map[string]*State // guarded by mu
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{states: map[string]*State{}} }

// State returns the named state, creating it on first use.
func (m *MemoryStore) State(name string, cfg Config) *State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.states[name]; ok {
		s.SetConfig(cfg)
		return s
	}
	s := NewState(name, cfg)
	m.states[name] = s
	return s
}

// Forget drops the named state.
func (m *MemoryStore) Forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.states, name)
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
