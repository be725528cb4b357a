package placement

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// JumpHash is the jump consistent hash of Lamping & Veach, "A Fast, Minimal
// Memory, Consistent Hash Algorithm" (2014), bit for bit as the paper gives
// it: the same 64-bit key and bucket count give the same bucket as the
// paper's C++ code. It returns a bucket in [0, buckets), or -1 when buckets
// is not positive.
//
// The key jumps forward through bucket numbers; each jump lands on a bucket
// that would take the key over if the set grew that far, so growing from n
// to n+1 buckets moves exactly the keys that land on bucket n: 1/(n+1).
func JumpHash(key uint64, buckets int32) int32 {
	b, j := int64(-1), int64(0)
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int32(b)
}

// Jump places string keys with JumpHash over xxHash64 of the key.
//
// Jump keeps no table and moves the minimum on growth, but its nodes are
// numbered 0..N-1, and it is the numbers that own keys. Nodes are numbered
// in natural name order (digit runs compared as numbers: cache-9 before
// cache-10), whatever order they are given in, so that every process agrees;
// a set grows cheaply by a name that sorts last and shrinks cheaply by the
// one that does. Adding or removing any other renumbers every node after it
// and moves far more keys than 1/N: Add and Remove refuse that, Set does it
// (and `rotor moves` shows what it costs). Jump does not support weights.
type Jump struct {
	mu   sync.Mutex // serialises membership changes
	snap atomic.Pointer[[]Node]
}

var (
	_ Mutable   = (*Jump)(nil)
	_ Explainer = (*Jump)(nil)
)

// ErrNotLast is returned by Jump.Add and Jump.Remove for a node that does
// not sort last.
var ErrNotLast = fmt.Errorf("placement: jump can only add or remove the node that sorts last")

// NewJump builds a jump placer over nodes, numbered in natural name order.
func NewJump(nodes []Node) (*Jump, error) {
	j := &Jump{}
	if err := j.Set(nodes); err != nil {
		return nil, err
	}
	return j, nil
}

// Set replaces the node set, renumbering in natural name order.
func (j *Jump) Set(nodes []Node) error {
	nodes, err := validateNodes(nodes)
	if err != nil {
		return err
	}
	if err := requireUnitWeights("jump", nodes); err != nil {
		return err
	}
	canonical(nodes)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.snap.Store(&nodes)
	return nil
}

// Add adds a node as bucket N; a node whose name would not sort last
// returns ErrNotLast.
func (j *Jump) Add(node Node) error {
	nodes := *j.snap.Load()
	if len(nodes) > 0 && compareNames(node.Name, nodes[len(nodes)-1].Name) <= 0 {
		if slices.ContainsFunc(nodes, func(n Node) bool { return n.Name == node.Name }) {
			return fmt.Errorf("placement: node %q: duplicate name", node.Name)
		}
		return fmt.Errorf("%w (%q sorts before %q)", ErrNotLast, node.Name, nodes[len(nodes)-1].Name)
	}
	return j.Set(addNode(nodes, node))
}

// Remove removes the last node; any other returns ErrNotLast.
func (j *Jump) Remove(name string) error {
	nodes := *j.snap.Load()
	if len(nodes) > 0 && nodes[len(nodes)-1].Name == name {
		return j.Set(nodes[:len(nodes)-1])
	}
	if _, err := removeNode(nodes, name); err != nil {
		return err
	}
	return fmt.Errorf("%w (%q is not last)", ErrNotLast, name)
}

// Owner returns the node numbered JumpHash(xxhash(key), N).
func (j *Jump) Owner(key string) (string, error) {
	nodes := *j.snap.Load()
	if len(nodes) == 0 {
		return "", ErrNoNodes
	}
	return nodes[JumpHash(XXHash.Sum(key), int32(len(nodes)))].Name, nil
}

// AppendOwners appends the owner, then replicas found by jumping again with
// the key rehashed (mix64 of hash+i), skipping buckets already taken. Each
// replica is thereby itself a jump placement, so it too moves minimally.
func (j *Jump) AppendOwners(dst []string, key string, n int) ([]string, error) {
	nodes := *j.snap.Load()
	if len(nodes) == 0 {
		return dst, ErrNoNodes
	}
	n = min(n, len(nodes))
	start := len(dst)
	kh := XXHash.Sum(key)
	// The rehash loop finds r distinct buckets in about N*ln(N/(N-r))
	// tries; past a generous cap the rest are filled in bucket order.
	for i, tries := uint64(0), 0; len(dst)-start < n && tries < 64*len(nodes); i, tries = i+1, tries+1 {
		h := kh
		if i > 0 {
			h = mix64(kh + i)
		}
		if name := nodes[JumpHash(h, int32(len(nodes)))].Name; !slices.Contains(dst[start:], name) {
			dst = append(dst, name)
		}
	}
	for i := 0; len(dst)-start < n; i++ {
		if !slices.Contains(dst[start:], nodes[i].Name) {
			dst = append(dst, nodes[i].Name)
		}
	}
	return dst, nil
}

// Nodes returns a copy of the node set, in bucket order.
func (j *Jump) Nodes() []Node { return copyNodes(*j.snap.Load()) }

// Explain shows each jump of the key through bucket numbers.
func (j *Jump) Explain(key string, n int) (Explanation, error) {
	nodes := *j.snap.Load()
	e := Explanation{Algo: "jump", Key: key, Hash: XXHash}
	if len(nodes) == 0 {
		return e, ErrNoNodes
	}
	e.KeyHash = XXHash.Sum(key)
	k, b, jj := e.KeyHash, int64(-1), int64(0)
	for jj < int64(len(nodes)) {
		b = jj
		e.Steps = append(e.Steps, Step{Label: "bucket " + strconv.FormatInt(b, 10), Hash: k, Node: nodes[b].Name, Note: "landed"})
		k = k*2862933555777941757 + 1
		jj = int64(float64(b+1) * (float64(int64(1)<<31) / float64((k>>33)+1)))
	}
	e.Steps = append(e.Steps, Step{Note: fmt.Sprintf("next jump is to bucket %d, past the last (%d): stop", jj, len(nodes)-1)})
	owners, _ := j.AppendOwners(nil, key, max(n, 1))
	e.Owners = owners
	return e, nil
}
