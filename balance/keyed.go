package balance

import (
	"fmt"
	"strings"

	"github.com/rotor-lb/rotor/health"
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
	algo   string           // immutable
	placer placement.Placer // membership follows the latest Build
	set    func([]placement.Node) error
	bnd    *placement.Bounded // when algo is "bounded"
}

var _ Policy = (*Keyed)(nil)

// NewKeyed returns a keyed policy using algo, one of KeyedAlgorithms.
func NewKeyed(algo string, opts KeyedOptions) (*Keyed, error) {
	k := &Keyed{algo: algo}
	var err error
	switch algo {
	case "ring":
		var r *placement.Ring
		r, err = placement.NewRing(nil, opts.Ring)
		k.placer, k.set = r, r.Set
	case "rendezvous":
		r, _ := placement.NewRendezvous(nil)
		k.placer, k.set = r, r.Set
	case "maglev":
		var m *placement.Maglev
		m, err = placement.NewMaglev(nil, placement.MaglevOptions{TableSize: opts.TableSize})
		if err == nil {
			k.placer, k.set = m, m.Set
		}
	case "bounded":
		k.bnd, err = placement.NewBounded(nil, placement.BoundedOptions{Ring: opts.Ring, Epsilon: opts.Epsilon})
		if err == nil {
			k.placer, k.set = k.bnd, k.bnd.Set
		}
	default:
		return nil, fmt.Errorf("%q is not a key placer (%s)", algo, strings.Join(KeyedAlgorithms, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "placement: "))
	}
	return k, nil
}

// Name returns the placer's name: "ring", "rendezvous", "maglev" or "bounded".
func (k *Keyed) Name() string { return k.algo }

// Build moves the placer to s's endpoints and returns a picker over s.
func (k *Keyed) Build(s *Set) Picker {
	if err := k.set(s.nodes()); err != nil {
		// Pools hand over unique names and weights >= 1, which every
		// placer accepts; maglev alone can refuse, when there are more
		// endpoints than table slots. Then the picker places at random.
		return &keyedPicker{set: s}
	}
	return &keyedPicker{set: s, placer: k.placer, bnd: k.bnd, ok: s.availableNamed}
}

type keyedPicker struct {
	set    *Set
	placer placement.Placer
	bnd    *placement.Bounded
	ok     func(string) bool // set.availableNamed, bound once so picks do not allocate
}

func (p *keyedPicker) Pick(r Request) (*Endpoint, error) {
	if p.bnd != nil {
		// Every pick acquires, so that every Done releases what it took;
		// key-less requests share the key "", which the bound spreads.
		name, err := p.bnd.AcquireFunc(r.Key, p.ok)
		if err != nil {
			return nil, ErrNoEndpoint
		}
		if ep := p.set.Get(name); ep != nil {
			return ep, nil
		}
		p.bnd.Release(name)
		return nil, ErrNoEndpoint
	}
	if r.Key == "" || p.placer == nil {
		if ep := randomAvailable(p.set); ep != nil {
			return ep, nil
		}
		return nil, ErrNoEndpoint
	}
	owner, err := p.placer.Owner(r.Key)
	if err != nil {
		return nil, ErrNoEndpoint
	}
	if p.ok(owner) {
		return p.set.Get(owner), nil
	}
	return walkOwners(p.set, p.placer, r.Key, p.ok)
}

// walkOwners returns the first endpoint in key's preference order that ok
// accepts.
func walkOwners(s *Set, placer placement.Placer, key string, ok func(string) bool) (*Endpoint, error) {
	owners, err := placer.AppendOwners(make([]string, 0, len(s.endpoints)), key, len(s.endpoints))
	if err != nil {
		return nil, ErrNoEndpoint
	}
	for _, name := range owners {
		if ok(name) {
			return s.Get(name), nil
		}
	}
	return nil, ErrNoEndpoint
}

// Done gives a bounded placer its unit back.
func (p *keyedPicker) Done(ep *Endpoint, _ health.Verdict) {
	if p.bnd != nil {
		p.bnd.Release(ep.Name)
	}
}

var _ Observer = (*keyedPicker)(nil)
