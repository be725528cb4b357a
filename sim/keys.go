package sim

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/rotor-lb/rotor/placement"
)

// PlacerFactory builds a placer by name over nodes (config.NewPlacer).
type PlacerFactory func(algo string, nodes []placement.Node) (placement.Placer, error)

// KeysOptions set up the keys scenario: a membership change on every
// placer, the keys it moves, and the cache-miss storm that follows when a
// cache sits in front of each node.
type KeysOptions struct {
	Algos   []string // nil means ring, rendezvous, jump, maglev, bounded, modn
	Factory PlacerFactory
	Nodes   int // before the change; 0 means 10
	Keys    int // 0 means 100,000
	// Rate is requests per second after the change, over keys drawn
	// uniformly; 0 means 10,000.
	Rate float64
	// Seconds is how long to watch after the change; 0 means 60.
	Seconds int
	// Changes: "add" (one node joins), "remove" (the middle node leaves),
	// "replace" (the middle node leaves and a new one joins). Nil: all three.
	Changes []string
	Seed    uint64
}

// KeysRow is one placer's result for one change.
type KeysRow struct {
	Algo   string  `json:"algo"`
	Change string  `json:"change"`
	Moved  float64 `json:"moved"` // share of keys whose node changed
	Ideal  float64 `json:"ideal"`
	// MissesPerSecond[i] is the cache misses in second i after the change:
	// requests for a moved key not fetched again since.
	MissesPerSecond []int `json:"misses_per_second"`
	TotalMisses     int   `json:"total_misses"`
	// Warm is the seconds until 99% of the moved keys have been fetched
	// again, or -1 if not within the window.
	Warm int `json:"warm_seconds"`
}

// KeysReport is the scenario's result.
type KeysReport struct {
	Nodes int       `json:"nodes"`
	Keys  int       `json:"keys"`
	Rate  float64   `json:"rate"`
	Rows  []KeysRow `json:"rows"`
}

// Keys runs the scenario.
func Keys(ctx context.Context, o KeysOptions) (KeysReport, error) {
	if o.Algos == nil {
		o.Algos = []string{"ring", "rendezvous", "jump", "maglev", "bounded", "modn"}
	}
	if o.Nodes == 0 {
		o.Nodes = 10
	}
	if o.Keys == 0 {
		o.Keys = 100000
	}
	if o.Rate == 0 {
		o.Rate = 10000
	}
	if o.Seconds == 0 {
		o.Seconds = 60
	}
	if o.Changes == nil {
		o.Changes = []string{"add", "remove", "replace"}
	}
	if o.Factory == nil || o.Nodes < 2 || o.Keys < 1 || o.Rate < 1 || o.Seconds < 1 {
		return KeysReport{}, fmt.Errorf("nodes must be at least 2, keys, rate and seconds positive")
	}
	before := make([]placement.Node, o.Nodes)
	for i := range before {
		before[i] = placement.Node{Name: "n" + strconv.Itoa(i)}
	}
	keys := placement.Keys(o.Keys)
	rep := KeysReport{Nodes: o.Nodes, Keys: o.Keys, Rate: o.Rate}
	for _, change := range o.Changes {
		after, err := changed(before, change)
		if err != nil {
			return KeysReport{}, err
		}
		for _, algo := range o.Algos {
			if err := ctx.Err(); err != nil {
				return KeysReport{}, err
			}
			pb, err := o.Factory(algo, before)
			if err != nil {
				return KeysReport{}, fmt.Errorf("%s: %w", algo, err)
			}
			pa, err := o.Factory(algo, after)
			if err != nil {
				return KeysReport{}, fmt.Errorf("%s: %w", algo, err)
			}
			ob, err := placement.Assign(pb, keys)
			if err != nil {
				return KeysReport{}, err
			}
			oa, err := placement.Assign(pa, keys)
			if err != nil {
				return KeysReport{}, err
			}
			row := KeysRow{Algo: algo, Change: change, Ideal: placement.IdealMovement(before, after), Warm: -1}
			cold := make([]bool, len(keys)) // moved and not fetched since
			movedCount := 0
			for i := range keys {
				if ob[i] != oa[i] {
					cold[i] = true
					movedCount++
				}
			}
			row.Moved = float64(movedCount) / float64(len(keys))
			// The same request stream for every placer and change.
			src := newStream(o.Seed)
			perSecond := int(math.Round(o.Rate))
			refetched := 0
			if movedCount == 0 {
				row.Warm = 0
			}
			for sec := range o.Seconds {
				misses := 0
				for range perSecond {
					if k := src.intn(len(keys)); cold[k] {
						cold[k] = false
						misses++
					}
				}
				refetched += misses
				row.MissesPerSecond = append(row.MissesPerSecond, misses)
				row.TotalMisses += misses
				if row.Warm < 0 && float64(refetched) >= 0.99*float64(movedCount) {
					row.Warm = sec + 1
				}
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	return rep, nil
}

func changed(before []placement.Node, change string) ([]placement.Node, error) {
	mid := len(before) / 2
	switch change {
	case "add":
		return append(append([]placement.Node(nil), before...), placement.Node{Name: "new"}), nil
	case "remove":
		return append(append([]placement.Node(nil), before[:mid]...), before[mid+1:]...), nil
	case "replace":
		out := append(append([]placement.Node(nil), before[:mid]...), before[mid+1:]...)
		return append(out, placement.Node{Name: "new"}), nil
	}
	return nil, fmt.Errorf("change: %q is not add, remove or replace", change)
}
