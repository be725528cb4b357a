package placement

import (
	"slices"
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

// The Maglev paper's Table 1: three backends with (offset, skip) (3, 4),
// (0, 2) and (3, 1) over M = 7 fill the table B1 B0 B1 B0 B2 B2 B0.
func TestMaglevPaperTable1(t *testing.T) {
	got := fillTable(7, []uint64{3, 0, 3}, []uint64{4, 2, 1}, []int{1, 1, 1})
	want := []int32{1, 0, 1, 0, 2, 2, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("table %v, paper's Table 1 is %v", got, want)
	}
}

func TestCompareNames(t *testing.T) {
	sorted := []string{"", "0", "00", "01", "1", "2", "9", "10", "a", "a01", "a1", "a2", "a10", "a10b", "a10c", "ab", "b", "cache-9", "cache-10", "n99999999999999999999", "n100000000000000000000"}
	for i := range sorted {
		for j := range sorted {
			got := compareNames(sorted[i], sorted[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("compareNames(%q, %q) = %d, want %d", sorted[i], sorted[j], got, want)
			}
		}
	}
}
