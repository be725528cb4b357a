package placement

import (
	"strconv"
	"testing"
)

// Every round of the fill gives each node one slot per unit of weight, so
// slot counts differ by at most the weight of one round.
func TestMaglevTableShares(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []Node
		size  int
	}{
		{"one", []Node{{Name: "a"}}, 13},
		{"three", []Node{{Name: "a"}, {Name: "b"}, {Name: "c"}}, 65537},
		{"hundred", hundred(), 65537},
		{"weighted", []Node{{Name: "a", Weight: 3}, {Name: "b"}, {Name: "c", Weight: 2}}, 10007},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMaglev(tc.nodes, MaglevOptions{TableSize: tc.size})
			if err != nil {
				t.Fatal(err)
			}
			s := m.snap.Load()
			counts := make([]int, len(s.nodes))
			for _, o := range s.table {
				if o < 0 {
					t.Fatal("table has an empty slot")
				}
				counts[o]++
			}
			var totalWeight int
			for _, n := range s.nodes {
				totalWeight += n.Weight
			}
			for i, n := range s.nodes {
				fair := float64(tc.size) * float64(n.Weight) / float64(totalWeight)
				if d := float64(counts[i]) - fair; d > float64(totalWeight) || d < -float64(totalWeight) {
					t.Errorf("node %s: %d slots, fair share %.1f", n.Name, counts[i], fair)
				}
			}
		})
	}
}

func hundred() []Node {
	out := make([]Node, 100)
	for i := range out {
		out[i] = Node{Name: "n" + strconv.Itoa(i), Weight: 1}
	}
	return out
}
