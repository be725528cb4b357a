package placement

import (
	"fmt"
	"strconv"
)

// Acquirer is implemented by placers whose answer depends on the load they
// have handed out (Bounded). Assign places keys through it, so that each
// key counts against its node as it would in use.
type Acquirer interface {
	Acquire(key string) (string, error)
}

var _ Acquirer = (*Bounded)(nil)

// Keys returns n keys "user:0" .. "user:n-1", the key set article 000's
// examples use.
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// Assign returns the owner of each key. Placers that are Acquirers place
// every key as held, in order; the others are plain lookups.
func Assign(p Placer, keys []string) ([]string, error) {
	owners := make([]string, len(keys))
	lookup := p.Owner
	if a, ok := p.(Acquirer); ok {
		lookup = a.Acquire
	}
	for i, k := range keys {
		o, err := lookup(k)
		if err != nil {
			return nil, err
		}
		owners[i] = o
	}
	return owners, nil
}

// Spread summarises how evenly keys fall on nodes.
type Spread struct {
	// MaxOverMean is the fullest node's keys over the mean (1 is perfect).
	// With weights, each node's count is first divided by its share.
	MaxOverMean float64 `json:"max_over_mean"`
	// StddevOverMean is the coefficient of variation of keys per node.
	StddevOverMean float64 `json:"stddev_over_mean"`
	// Keys counts keys per node.
	Keys map[string]int `json:"keys"`
}

// SpreadOf measures how owners (one per key) spread over nodes, each node's
// count scaled by its weight so that a node of weight 2 with twice the keys
// counts as even.
func SpreadOf(nodes []Node, owners []string) Spread {
	counts := make(map[string]int, len(nodes))
	for _, n := range nodes {
		counts[n.Name] = 0
	}
	for _, o := range owners {
		counts[o]++
	}
	shares := make([]float64, len(nodes))
	for i, n := range nodes {
		shares[i] = float64(counts[n.Name])
	}
	sp := SpreadOfShares(nodes, shares)
	sp.Keys = counts
	return sp
}

// Movement is what one change of membership did to a key set.
type Movement struct {
	Keys  int `json:"keys"`
	Moved int `json:"moved"`
	// Fraction is Moved/Keys.
	Fraction float64 `json:"fraction"`
	// Ideal is the least fraction any placer must move for this change:
	// 1 - sum over nodes of min(share before, share after). One node added
	// to N equal ones gives 1/(N+1).
	Ideal float64 `json:"ideal"`
	// Stray counts moved keys whose old and new owners both stayed in the set
	// with the same weight: keys a minimal placer would have left alone.
	Stray int `json:"stray"`
	// OnlyChanged reports that no key moved between two unchanged nodes:
	// every moved key went to a new node or came from a removed one.
	OnlyChanged   bool   `json:"only_changed"`
	Before, After Spread `json:"-"`
}

// Compare places keys before and after a change of membership and measures
// the movement and the spread on each side.
func Compare(before, after Placer, keys []string) (Movement, error) {
	ob, err := Assign(before, keys)
	if err != nil {
		return Movement{}, fmt.Errorf("before: %w", err)
	}
	oa, err := Assign(after, keys)
	if err != nil {
		return Movement{}, fmt.Errorf("after: %w", err)
	}
	return CompareOwners(before.Nodes(), after.Nodes(), ob, oa), nil
}

// CompareOwners measures a change of membership from the owners of the
// same keys, in the same order, before (on nodes nb) and after (on na).
func CompareOwners(nb, na []Node, ob, oa []string) Movement {
	changed := changedNodes(nb, na)
	m := Movement{Keys: len(ob), Ideal: IdealMovement(nb, na), Before: SpreadOf(nb, ob), After: SpreadOf(na, oa)}
	for i := range ob {
		if ob[i] == oa[i] {
			continue
		}
		m.Moved++
		if !changed[ob[i]] && !changed[oa[i]] {
			m.Stray++
		}
	}
	if len(ob) > 0 {
		m.Fraction = float64(m.Moved) / float64(len(ob))
	}
	m.OnlyChanged = m.Stray == 0
	return m
}

// IdealMovement is the fraction of keys that must move when the node set
// changes from before to after, weights included.
func IdealMovement(before, after []Node) float64 {
	sb, sa := shares(before), shares(after)
	stay := 0.0
	for name, b := range sb {
		stay += min(b, sa[name])
	}
	return max(1-stay, 0)
}

func shares(nodes []Node) map[string]float64 {
	var total float64
	for _, n := range nodes {
		total += float64(n.weight())
	}
	out := make(map[string]float64, len(nodes))
	for _, n := range nodes {
		out[n.Name] = float64(n.weight()) / total
	}
	return out
}

// changedNodes names the nodes that joined, left or changed weight.
func changedNodes(before, after []Node) map[string]bool {
	wb := make(map[string]int, len(before))
	for _, n := range before {
		wb[n.Name] = n.weight()
	}
	changed := make(map[string]bool)
	for _, n := range after {
		if w, ok := wb[n.Name]; !ok || w != n.weight() {
			changed[n.Name] = true
		}
		delete(wb, n.Name)
	}
	for name := range wb {
		changed[name] = true
	}
	return changed
}
