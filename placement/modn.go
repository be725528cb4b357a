package placement

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
)

// ModN places a key on node hash(key) mod N. It is here only as the baseline
// the consistent placers are measured against: a key stays put across a
// change from N to N+1 nodes only when h mod N == h mod (N+1), about one key
// in N+1, so growing a cache tier from 3 to 4 nodes moves three keys in four.
type ModN struct {
	hash Hash       // immutable after NewModN
	mu   sync.Mutex // serialises membership changes
	snap atomic.Pointer[[]Node]
}

var (
	_ Mutable   = (*ModN)(nil)
	_ Explainer = (*ModN)(nil)
)

// NewModN builds the hash-mod-N baseline over nodes, numbered in natural
// name order (as Jump numbers them) so that every process agrees.
func NewModN(nodes []Node, hash Hash) (*ModN, error) {
	m := &ModN{hash: hash}
	if err := m.Set(nodes); err != nil {
		return nil, err
	}
	return m, nil
}

// Set replaces the node set.
func (m *ModN) Set(nodes []Node) error {
	nodes, err := validateNodes(nodes)
	if err != nil {
		return err
	}
	if err := requireUnitWeights("modn", nodes); err != nil {
		return err
	}
	canonical(nodes)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap.Store(&nodes)
	return nil
}

// Add adds a node.
func (m *ModN) Add(node Node) error { return m.Set(addNode(*m.snap.Load(), node)) }

// Remove removes a node; every node after it is renumbered.
func (m *ModN) Remove(name string) error {
	nodes, err := removeNode(*m.snap.Load(), name)
	if err != nil {
		return err
	}
	return m.Set(nodes)
}

// Owner returns node hash(key) mod N.
func (m *ModN) Owner(key string) (string, error) {
	nodes := *m.snap.Load()
	if len(nodes) == 0 {
		return "", ErrNoNodes
	}
	return nodes[m.hash.Sum(key)%uint64(len(nodes))].Name, nil
}

// AppendOwners appends nodes (h+i) mod N for i = 0..n-1.
func (m *ModN) AppendOwners(dst []string, key string, n int) ([]string, error) {
	nodes := *m.snap.Load()
	if len(nodes) == 0 {
		return dst, ErrNoNodes
	}
	h := m.hash.Sum(key) % uint64(len(nodes))
	for i := range uint64(min(n, len(nodes))) {
		dst = append(dst, nodes[(h+i)%uint64(len(nodes))].Name)
	}
	return dst, nil
}

// Nodes returns a copy of the node set.
func (m *ModN) Nodes() []Node { return copyNodes(*m.snap.Load()) }

// Explain shows the division.
func (m *ModN) Explain(key string, n int) (Explanation, error) {
	nodes := *m.snap.Load()
	e := Explanation{Algo: "modn", Key: key, Hash: m.hash}
	if len(nodes) == 0 {
		return e, ErrNoNodes
	}
	e.KeyHash = m.hash.Sum(key)
	i := e.KeyHash % uint64(len(nodes))
	e.Steps = append(e.Steps, Step{Note: fmt.Sprintf("hash mod %d = %d", len(nodes), i)})
	e.Owners, _ = m.AppendOwners(nil, key, max(n, 1))
	for r, name := range e.Owners {
		b := (i + uint64(r)) % uint64(len(nodes))
		e.Steps = append(e.Steps, Step{Label: "node " + strconv.FormatUint(b, 10), Hash: b, Node: name, Note: ordinalNote(r + 1)})
	}
	return e, nil
}
