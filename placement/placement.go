// Package placement maps keys to nodes so that the same key always lands on
// the same node and few keys move when nodes come and go.
//
// It holds the classic placers side by side, all behind one small interface:
//
//   - Ring: consistent hashing with virtual nodes (Karger et al. 1997), with
//     replicas on the next R distinct nodes clockwise (DeCandia et al. 2007).
//   - Rendezvous: highest random weight (Thaler & Ravishankar 1998), weighted by
//     the logarithmic method.
//   - Jump: Lamping & Veach 2014, for numbered buckets.
//   - Maglev: Eisenbud et al. 2016, a lookup table of prime size.
//   - Bounded: consistent hashing with bounded loads (Mirrokni, Thorup &
//     Zadimoghaddam 2016) over a Ring.
//   - ModN: hash(key) % N, only as the baseline the others are measured against.
//
// Every placer keeps an immutable snapshot of its membership behind an
// atomic pointer: lookups never block and are safe while another goroutine
// changes the node set. The package has no network code in it.
package placement

import (
	"errors"
	"fmt"
)

// ErrNoNodes is returned by lookups on a placer whose node set is empty.
var ErrNoNodes = errors.New("placement: no nodes")

// ErrUnknownNode is returned when a membership change names a node that is
// not in the set.
var ErrUnknownNode = errors.New("placement: unknown node")

// Node is one member of a placer's set. Its Name is its identity: it is what
// is hashed, so it must be stable across processes and restarts.
type Node struct {
	Name string
	// Weight is the node's relative capacity. Zero means 1. Placers that
	// cannot honour weights (Jump, ModN) refuse any weight other than 1.
	Weight int
}

func (n Node) weight() int {
	if n.Weight == 0 {
		return 1
	}
	return n.Weight
}

// Placer is the one interface every placer satisfies.
type Placer interface {
	// Owner returns the node that owns key, or ErrNoNodes.
	Owner(key string) (string, error)
	// AppendOwners appends to dst the first r distinct owners of key, in
	// preference order (the owner first), and returns the extended slice.
	// r is capped at the number of nodes. It allocates nothing when dst has
	// room for r more names.
	AppendOwners(dst []string, key string, r int) ([]string, error)
	// Nodes returns a copy of the current node set.
	Nodes() []Node
}

// Indexer is implemented by placers that can name a key's owner by its
// position in Nodes(): a lookup without the name, for a caller that keeps
// its own array of nodes (a balancer's endpoints) and would otherwise look
// the name up again. Positions are those of the set at the moment of the
// call: a caller that changes a Mutable placer's membership must take
// Nodes again.
type Indexer interface {
	// OwnerIndex returns the position in Nodes() of the node that owns
	// key, or ErrNoNodes.
	OwnerIndex(key string) (int, error)
}

// Mutable is implemented by placers whose membership can change after New.
// Each change publishes a new snapshot; lookups running at the same time see
// either the old set or the new one, never a mix.
type Mutable interface {
	Placer
	// Set replaces the whole node set.
	Set(nodes []Node) error
	// Add adds one node.
	Add(node Node) error
	// Remove removes the named node, or returns ErrUnknownNode.
	Remove(name string) error
}

// Owners is AppendOwners into a fresh slice.
func Owners(p Placer, key string, r int) ([]string, error) {
	return p.AppendOwners(make([]string, 0, max(r, 0)), key, r)
}

// validateNodes checks a node set: names non-empty and unique, weights not
// negative. It returns the set with zero weights normalised to 1, copied so
// the caller's slice is never retained.
func validateNodes(nodes []Node) ([]Node, error) {
	out := make([]Node, len(nodes))
	seen := make(map[string]struct{}, len(nodes))
	for i, n := range nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("placement: node %d: name must not be empty", i)
		}
		if n.Weight < 0 {
			return nil, fmt.Errorf("placement: node %q: weight must be positive (got %d)", n.Name, n.Weight)
		}
		if _, dup := seen[n.Name]; dup {
			return nil, fmt.Errorf("placement: node %q: duplicate name", n.Name)
		}
		seen[n.Name] = struct{}{}
		out[i] = Node{Name: n.Name, Weight: n.weight()}
	}
	return out, nil
}

// requireUnitWeights refuses weights for placers that cannot honour them.
func requireUnitWeights(algo string, nodes []Node) error {
	for _, n := range nodes {
		if n.weight() != 1 {
			return fmt.Errorf("placement: node %q: %s does not support weights (got %d)", n.Name, algo, n.Weight)
		}
	}
	return nil
}

// addNode and removeNode are the generic membership edits for placers that
// rebuild from a full set.
func addNode(nodes []Node, n Node) []Node {
	out := make([]Node, 0, len(nodes)+1)
	return append(append(out, nodes...), n)
}

func removeNode(nodes []Node, name string) ([]Node, error) {
	for i, n := range nodes {
		if n.Name == name {
			out := make([]Node, 0, len(nodes)-1)
			return append(append(out, nodes[:i]...), nodes[i+1:]...), nil
		}
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownNode, name)
}

func copyNodes(nodes []Node) []Node { return append([]Node(nil), nodes...) }

// unitFloat maps a 64-bit hash to a float in the open interval (0, 1).
func unitFloat(h uint64) float64 { return unit53(h >> 11) }

// unit53 is unitFloat of a hash's top 53 bits, given as such.
func unit53(h53 uint64) float64 { return (float64(h53) + 0.5) / (1 << 53) }
