package config

import (
	"fmt"
	"strings"

	"github.com/rotor-lb/rotor/placement"
)

// PlacerNames lists the key placers by name, in the order comparisons show
// them.
var PlacerNames = []string{"ring", "rendezvous", "jump", "maglev", "bounded", "modn"}

// PlacerParams are the placers' settings; zero values mean the defaults.
type PlacerParams struct {
	VNodes    int            // ring, bounded
	Hash      placement.Hash // ring, bounded, modn
	Epsilon   float64        // bounded
	TableSize int            // maglev
}

// NewPlacer builds the named placer over nodes. Errors say what is wrong
// without the "placement: " prefix, for callers to put their own field in
// front.
func NewPlacer(algo string, nodes []placement.Node, p PlacerParams) (placement.Placer, error) {
	var (
		pl  placement.Placer
		err error
	)
	ring := placement.RingOptions{VNodes: p.VNodes, Hash: p.Hash}
	switch algo {
	case "ring":
		pl, err = placement.NewRing(nodes, ring)
	case "rendezvous":
		pl, err = placement.NewRendezvous(nodes)
	case "jump":
		pl, err = placement.NewJump(nodes)
	case "maglev":
		pl, err = placement.NewMaglev(nodes, placement.MaglevOptions{TableSize: p.TableSize})
	case "bounded":
		pl, err = placement.NewBounded(nodes, placement.BoundedOptions{Ring: ring, Epsilon: p.Epsilon})
	case "modn":
		pl, err = placement.NewModN(nodes, p.Hash)
	default:
		return nil, fmt.Errorf("%q is not an algorithm (%s)", algo, strings.Join(PlacerNames, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "placement: "))
	}
	return pl, nil
}
