package balance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rotor-lb/rotor/placement"
)

// KeyedAlgorithms are the placers a Keyed policy can use.
var KeyedAlgorithms = []string{"ring", "rendezvous", "maglev", "bounded"}

// KeyedOptions tune a Keyed policy's placer.
type KeyedOptions struct {
	Ring      placement.RingOptions // ring and bounded
	Epsilon   float64               // bounded
	TableSize int                   // maglev
}

// Keyed places each request by its key with a placer from the placement
// package: the same key goes to the same endpoint while it is available,
// and few keys move when endpoints come and go. An unavailable owner is
// walked past: the ring to the next distinct endpoint clockwise, rendezvous
// to the next highest score, maglev to the next slot's endpoint. bounded
// also caps each endpoint at (1+eps) x the average of requests in flight,
// counted from pick to Done. A request with no key is placed at random
// (bounded: as the key "", which the bound spreads).
type Keyed struct {
	algo  string       // immutable
	opts  KeyedOptions // immutable
	loads *placement.Bounded
	// loads, for bounded: the placer every build derives from, so that
	// loads outlive membership changes (placement.Bounded.WithNodes).
}

var _ Policy = (*Keyed)(nil)

// NewKeyed returns a keyed policy using algo, one of KeyedAlgorithms.
func NewKeyed(algo string, opts KeyedOptions) (*Keyed, error) {
	k := &Keyed{algo: algo, opts: opts}
	if !slices.Contains(KeyedAlgorithms, algo) {
		return nil, fmt.Errorf("%q is not a key placer (%s)", algo, strings.Join(KeyedAlgorithms, ", "))
	}
	// An empty placer checks the options.
	p, err := k.placer(nil)
	if err != nil {
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "placement: "))
	}
	if algo == "bounded" {
		k.loads = p.(*placement.Bounded)
	}
	return k, nil
}

// placer returns a new placer over nodes.
func (k *Keyed) placer(nodes []placement.Node) (placement.Placer, error) {
	switch k.algo {
	case "ring":
		return placement.NewRing(nodes, k.opts.Ring)
	case "rendezvous":
		return placement.NewRendezvous(nodes)
	case "maglev":
		return placement.NewMaglev(nodes, placement.MaglevOptions{TableSize: k.opts.TableSize})
	case "bounded":
		if k.loads != nil {
			return k.loads.WithNodes(nodes)
		}
		return placement.NewBounded(nodes, placement.BoundedOptions{Ring: k.opts.Ring, Epsilon: k.opts.Epsilon})
	}
	return nil, fmt.Errorf("%q is not a key placer", k.algo)
}

// Name returns the placer's name: "ring", "rendezvous", "maglev" or "bounded".
func (k *Keyed) Name() string { return k.algo }

// Build returns a picker over s with a placer of its own: the running
// picker's placer is never changed, so a snapshot built and abandoned
// leaves nothing behind. Bounded loads are shared across builds by name.
func (k *Keyed) Build(s *Set) Picker {
	pl, err := k.placer(s.nodes())
	if err != nil {
		// Pools hand over unique names and weights >= 1, which every
		// placer accepts; maglev alone can refuse, when there are more
		// endpoints than table slots. Then the picker places at random.
		return &keyedPicker{set: s}
	}
	// Every placer names an owner by position, in its own order (maglev
	// sorts its nodes): map it to the set's once, so that a pick finds the
	// owner's endpoint without looking its name up.
	nodes := pl.Nodes()
	at := make([]int32, len(nodes))
	for i, n := range nodes {
		at[i] = int32(s.byName[n.Name])
	}
	if bnd, ok := pl.(*placement.Bounded); ok {
		p := &boundedPicker{set: s, bnd: bnd, at: at, of: make([]int32, len(at))}
		for i, j := range at {
			p.of[j] = int32(i)
		}
		p.ok = p.available
		return p
	}
	return &keyedPicker{set: s, placer: pl, index: pl.(placement.Indexer), at: at, ok: s.availableNamed}
}

type keyedPicker struct {
	set    *Set
	placer placement.Placer // nil: the placer refused the set, picks are random
	index  placement.Indexer
	at     []int32           // the set's index of the placer's node i
	ok     func(string) bool // set.availableNamed, bound once so picks do not allocate
}

func (p *keyedPicker) Pick(r Request) (*Endpoint, error) {
	if r.Key == "" || p.placer == nil {
		if ep := randomAvailable(p.set); ep != nil {
			return ep, nil
		}
		return nil, ErrNoEndpoint
	}
	i, err := p.index.OwnerIndex(r.Key)
	if err != nil {
		return nil, ErrNoEndpoint
	}
	if j := p.at[i]; p.set.states[j].Available(p.set.clock, p.set.states[j].max) {
		return p.set.endpoints[j], nil
	}
	return walkOwners(p.set, p.placer, r.Key, p.ok)
}

// boundedPicker places by bounded loads: every pick acquires a unit of
// the owner's load, which its Done gives back. Its placer's membership
// never changes (each build has its own), so positions stay valid.
type boundedPicker struct {
	set *Set
	bnd *placement.Bounded
	at  []int32          // the set's index of the placer's node i
	of  []int32          // the placer's position of the set's endpoint j
	ok  func(i int) bool // available, bound once so picks do not allocate
}

// available reports whether the placer's node i is available.
func (p *boundedPicker) available(i int) bool {
	st := &p.set.states[p.at[i]]
	return st.Available(p.set.clock, st.max)
}

func (p *boundedPicker) Pick(r Request) (*Endpoint, error) {
	// Every pick acquires, so that every Done releases what it took;
	// key-less requests share the key "", which the bound spreads.
	i, err := p.bnd.AcquireIndex(r.Key, p.ok)
	if err != nil {
		return nil, ErrNoEndpoint
	}
	return p.set.endpoints[p.at[i]], nil
}

// Done gives the placer its unit back.
func (p *boundedPicker) Done(ep *Endpoint) {
	if j := p.set.indexOf(ep); j >= 0 {
		p.bnd.ReleaseIndex(int(p.of[j]))
	}
}

var _ Observer = (*boundedPicker)(nil)

// walkOwners returns the first endpoint in key's preference order that ok
// accepts. It asks the placer for the order a few at a time (2, 4, 8...
// owners, each a prefix of the next): ranking every endpoint costs a
// rendezvous placer a scan of them all a rank, which at a thousand
// endpoints made each pick whose owner was down take milliseconds, while
// the next owner nearly always takes it.
func walkOwners(s *Set, placer placement.Placer, key string, ok func(string) bool) (*Endpoint, error) {
	var buf [8]string
	owners, checked := buf[:0], 0
	for n := 2; ; n *= 2 {
		n = min(n, len(s.endpoints))
		var err error
		if owners, err = placer.AppendOwners(owners[:0], key, n); err != nil {
			return nil, ErrNoEndpoint
		}
		for _, name := range owners[min(checked, len(owners)):] {
			if ok(name) {
				return s.Get(name), nil
			}
		}
		if n >= len(s.endpoints) || len(owners) < n {
			return nil, ErrNoEndpoint
		}
		checked = len(owners)
	}
}
