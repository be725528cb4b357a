package placement

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// DefaultTableSize is Maglev's lookup table size when MaglevOptions.TableSize
// is zero: the prime the Maglev paper uses for its small table.
const DefaultTableSize = 65537

// MaglevOptions configures a Maglev placer.
type MaglevOptions struct {
	// TableSize is the number of slots M. It must be a prime no smaller than
	// the node count; the paper advises M > 100*N for balance. Zero means
	// DefaultTableSize.
	TableSize int
}

// Maglev is Google's Maglev hashing (Eisenbud et al., NSDI 2016): a lookup
// table of prime size M, filled by letting every node claim slots in turn
// along its own permutation of 0..M-1 (offset + j*skip mod M, both from the
// node's name). A lookup is one hash and one array read.
//
// The table gives each node an almost exactly equal share (within one slot
// per node), at the price of some disruption: when a node joins or leaves,
// slots that neither it nor its neighbours owned can change hands as the
// turn order shifts. `rotor moves` measures how much beyond the ideal that
// is. Weights are honoured by giving a node of weight w w turns per round.
// Membership changes rebuild the table, O(M log M). Nodes take their turns
// in natural name order, whatever order they are given in, so that every
// process builds the same table from the same set.
type Maglev struct {
	size int        // immutable after NewMaglev
	mu   sync.Mutex // serialises membership changes
	snap atomic.Pointer[maglevSnap]
}

var (
	_ Mutable   = (*Maglev)(nil)
	_ Indexer   = (*Maglev)(nil)
	_ Explainer = (*Maglev)(nil)
)

type maglevSnap struct {
	nodes []Node
	table []int32 // slot -> index into nodes; nil when there are no nodes
}

// NewMaglev builds a Maglev placer over nodes.
func NewMaglev(nodes []Node, opts MaglevOptions) (*Maglev, error) {
	if opts.TableSize == 0 {
		opts.TableSize = DefaultTableSize
	}
	if !isPrime(opts.TableSize) {
		return nil, fmt.Errorf("placement: maglev table size must be prime (got %d)", opts.TableSize)
	}
	m := &Maglev{size: opts.TableSize}
	if err := m.Set(nodes); err != nil {
		return nil, err
	}
	return m, nil
}

// Set replaces the node set and rebuilds the table.
func (m *Maglev) Set(nodes []Node) error {
	nodes, err := validateNodes(nodes)
	if err != nil {
		return err
	}
	if len(nodes) > m.size {
		return fmt.Errorf("placement: maglev table size %d is smaller than the node count %d", m.size, len(nodes))
	}
	canonical(nodes)
	s := &maglevSnap{nodes: nodes, table: m.populate(nodes)}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap.Store(s)
	return nil
}

// populate fills the lookup table from each node's permutation of the
// slots: offset and skip from the node's name, as the paper derives them.
func (m *Maglev) populate(nodes []Node) []int32 {
	if len(nodes) == 0 {
		return nil
	}
	M := uint64(m.size)
	offset := make([]uint64, len(nodes))
	skip := make([]uint64, len(nodes))
	weight := make([]int, len(nodes))
	for i, n := range nodes {
		h := XXHash.Sum(n.Name)
		offset[i] = h % M
		skip[i] = mix64(h)%(M-1) + 1
		weight[i] = n.Weight
	}
	return fillTable(m.size, offset, skip, weight)
}

// fillTable is the paper's Populate: each round, every node in turn takes
// the next slot of its permutation (offset + j*skip mod size) that is still
// free, once per unit of weight, until all slots are taken.
func fillTable(size int, offset, skip []uint64, weight []int) []int32 {
	M := uint64(size)
	next := make([]uint64, len(offset))
	table := make([]int32, size)
	for i := range table {
		table[i] = -1
	}
	for filled := 0; ; {
		for i := range offset {
			for range weight[i] {
				c := (offset[i] + next[i]*skip[i]) % M
				for table[c] >= 0 {
					next[i]++
					c = (offset[i] + next[i]*skip[i]) % M
				}
				table[c] = int32(i)
				next[i]++
				if filled++; filled == size {
					return table
				}
			}
		}
	}
}

// Add adds a node and rebuilds the table.
func (m *Maglev) Add(node Node) error {
	return m.Set(addNode(m.snap.Load().nodes, node))
}

// Remove removes a node and rebuilds the table.
func (m *Maglev) Remove(name string) error {
	nodes, err := removeNode(m.snap.Load().nodes, name)
	if err != nil {
		return err
	}
	return m.Set(nodes)
}

// Owner returns the node in slot xxhash(key) mod M.
func (m *Maglev) Owner(key string) (string, error) {
	s := m.snap.Load()
	if len(s.nodes) == 0 {
		return "", ErrNoNodes
	}
	return s.nodes[s.owner(key)].Name, nil
}

// OwnerIndex is Owner as a position in Nodes().
func (m *Maglev) OwnerIndex(key string) (int, error) {
	s := m.snap.Load()
	if len(s.nodes) == 0 {
		return 0, ErrNoNodes
	}
	return s.owner(key), nil
}

// owner is the index of key's owner; the snapshot has nodes.
func (s *maglevSnap) owner(key string) int {
	return int(s.table[XXHash.Sum(key)%uint64(len(s.table))])
}

// AppendOwners appends the owner, then the distinct nodes of the following
// slots: the table is a well-shuffled sequence, so walking on from a slot is
// Maglev's analogue of a ring's clockwise walk.
func (m *Maglev) AppendOwners(dst []string, key string, n int) ([]string, error) {
	s := m.snap.Load()
	if len(s.nodes) == 0 {
		return dst, ErrNoNodes
	}
	n = min(n, len(s.nodes))
	start := len(dst)
	for c := XXHash.Sum(key) % uint64(len(s.table)); len(dst)-start < n; c = (c + 1) % uint64(len(s.table)) {
		if name := s.nodes[s.table[c]].Name; !slices.Contains(dst[start:], name) {
			dst = append(dst, name)
		}
	}
	return dst, nil
}

// Nodes returns a copy of the node set.
func (m *Maglev) Nodes() []Node { return copyNodes(m.snap.Load().nodes) }

// TableSize returns M.
func (m *Maglev) TableSize() int { return m.size }

// Explain shows the key's slot and the slots walked for replicas.
func (m *Maglev) Explain(key string, n int) (Explanation, error) {
	s := m.snap.Load()
	e := Explanation{Algo: "maglev", Key: key, Hash: XXHash}
	if len(s.nodes) == 0 {
		return e, ErrNoNodes
	}
	e.KeyHash = XXHash.Sum(key)
	n = min(max(n, 1), len(s.nodes))
	c := e.KeyHash % uint64(len(s.table))
	e.Steps = append(e.Steps, Step{Note: fmt.Sprintf("slot = hash mod %d = %d", len(s.table), c)})
	for ; len(e.Owners) < n; c = (c + 1) % uint64(len(s.table)) {
		name := s.nodes[s.table[c]].Name
		st := Step{Label: "slot " + strconv.FormatUint(c, 10), Hash: c, Node: name}
		if slices.Contains(e.Owners, name) {
			st.Note = "already chosen, walk on"
		} else {
			e.Owners = append(e.Owners, name)
			st.Note = ordinalNote(len(e.Owners))
		}
		e.Steps = append(e.Steps, st)
	}
	return e, nil
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
