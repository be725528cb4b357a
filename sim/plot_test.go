package sim_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rotor-lb/rotor/sim"
)

// Bars that span more than two decades get a log axis, so that the small
// ones stay visible; bars within two decades keep a linear one.
func TestBarChartLogWhenBarsSpanDecades(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		values []float64
		log    bool
	}{
		{[]float64{20, 30, 600000}, true},
		{[]float64{20, 30, 1500}, false},
		{[]float64{0, 3, 5}, false},
	} {
		file := filepath.Join(dir, "bars.svg")
		if err := sim.BarChart(file, "t", "latency (ms)", []string{"a", "b", "c"}, []sim.Series{{Name: "mean", Values: tc.values}}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), "(log scale)"); got != tc.log {
			t.Errorf("%v: log scale %v, want %v", tc.values, got, tc.log)
		}
	}
}

// Panels side by side each keep their own axis: a rate and a latency are
// never drawn on one scale.
func TestSavePanelsSideBySide(t *testing.T) {
	file := filepath.Join(t.TempDir(), "two.svg")
	err := sim.SavePanels(file,
		sim.Panel{Title: "success rate", YLabel: "percent", Labels: []string{"a", "b"}, Series: []sim.Series{{Name: "ok", Values: []float64{80, 99}}}},
		sim.Panel{Title: "latency", YLabel: "seconds", Labels: []string{"a", "b"}, Series: []sim.Series{{Name: "mean", Values: []float64{0.7, 0.4}}}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	for _, want := range []string{"success rate", "percent", "latency", "seconds"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if err := sim.SavePanels(filepath.Join(t.TempDir(), "x.gif"), sim.Panel{}); err == nil {
		t.Error("a .gif was accepted")
	}
}

// Every series of a chart of up to eight gets its own colour, dashes and
// glyph, so that ring and hash % N never look alike.
func TestSeriesStylesDistinct(t *testing.T) {
	seen := map[string]bool{}
	for i := range 8 {
		c, d, g := sim.Style(i)
		key := fmt.Sprint(c.RGBA())
		if seen[key] {
			t.Errorf("series %d repeats a colour", i)
		}
		seen[key] = true
		for j := range i {
			_, dj, gj := sim.Style(j)
			if g == gj && sameDashes(d, dj) {
				t.Errorf("series %d and %d share dashes and glyph", i, j)
			}
		}
	}
}

func sameDashes[T comparable](a, b []T) bool { return slices.Equal(a, b) }
