package sim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one named row of values in a chart, one value per label (bar
// charts) or per x (line charts).
type Series struct {
	Name   string
	Values []float64
}

// Panel is one chart: bars grouped by label, or lines over X. A file
// holds one panel or several side by side (SavePanels), each with its own
// axis, so that a rate and a latency never share a scale.
type Panel struct {
	Title  string
	XLabel string // line charts
	YLabel string
	// Labels name the bar groups; X, when set, makes a line chart.
	Labels []string
	X      []float64
	Series []Series
	// Log puts the y axis on a log scale. Values that span more than two
	// decades get one whatever Log says, so that the small bars stay
	// visible beside the tall ones; values at or below zero are drawn at
	// the axis's floor.
	Log bool
}

// palette tells series apart in colour (the Okabe–Ito colours, which stay
// distinct for the colour-blind), and dashes and glyphs tell them apart in
// black and white and where lines lie on one another.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermilion
	color.RGBA{0, 158, 115, 255},   // bluish green
	color.RGBA{204, 121, 167, 255}, // reddish purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{240, 228, 66, 255},  // yellow
}

var dashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(3)},
	{vg.Points(2), vg.Points(2)},
	{vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)},
	{vg.Points(12), vg.Points(4)},
	{vg.Points(1), vg.Points(4)},
	{vg.Points(4), vg.Points(2), vg.Points(1), vg.Points(2), vg.Points(1), vg.Points(2)},
	{vg.Points(10), vg.Points(2), vg.Points(2), vg.Points(2)},
}

var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{},
	draw.PlusGlyph{}, draw.RingGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{},
}

// Style returns series i's colour, dash pattern and glyph.
func Style(i int) (color.Color, []vg.Length, draw.GlyphDrawer) {
	return palette[i%len(palette)], dashes[i%len(dashes)], glyphs[i%len(glyphs)]
}

// checkPlotFile accepts .svg and .png.
func checkPlotFile(file string) error {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("plot: %q must end in .svg or .png", file)
}

// BarChart draws grouped bars into file: one group per label, one bar per
// series.
func BarChart(file, title, ylabel string, labels []string, series []Series) error {
	return SavePanels(file, Panel{Title: title, YLabel: ylabel, Labels: labels, Series: series})
}

// LineChart draws one line per series over x into file.
func LineChart(file, title, xlabel, ylabel string, x []float64, series []Series) error {
	return SavePanels(file, Panel{Title: title, XLabel: xlabel, YLabel: ylabel, X: x, Series: series})
}

// SavePanels draws the panels side by side into file (.svg or .png).
func SavePanels(file string, panels ...Panel) error {
	if err := checkPlotFile(file); err != nil {
		return err
	}
	if len(panels) == 0 {
		return fmt.Errorf("plot: nothing to draw")
	}
	plots := make([]*plot.Plot, len(panels))
	width := vg.Length(0)
	for i, pn := range panels {
		p, w, err := pn.build()
		if err != nil {
			return err
		}
		plots[i], width = p, width+w
	}
	height := 12 * vg.Centimeter
	c, err := draw.NewFormattedCanvas(width, height, strings.TrimPrefix(strings.ToLower(filepath.Ext(file)), "."))
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Centimeter}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: %s: %w", file, err)
	}
	return nil
}

// build makes the panel's plot and says how wide it wants to be.
func (pn Panel) build() (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = pn.Title
	p.X.Label.Text = pn.XLabel
	p.Y.Label.Text = pn.YLabel
	p.Legend.Top = true
	ax := newYAxis(pn.Series, pn.Log)
	if ax.log {
		p.Y.Tick.Marker = ax
		p.Y.Label.Text += " (log scale)"
	}
	if pn.X != nil {
		if err := pn.lines(p, ax); err != nil {
			return nil, 0, err
		}
		return p, 18 * vg.Centimeter, nil
	}
	if err := pn.bars(p, ax); err != nil {
		return nil, 0, err
	}
	w := vg.Length(max(16, len(pn.Labels)*len(pn.Series))) * vg.Centimeter * 0.6
	return p, min(max(w, 16*vg.Centimeter), 40*vg.Centimeter), nil
}

func (pn Panel) bars(p *plot.Plot, ax yAxis) error {
	width := vg.Points(max(6, min(20, 48/float64(max(len(pn.Series), 1)))))
	for i, s := range pn.Series {
		vals := make(plotter.Values, len(s.Values))
		for j, v := range s.Values {
			vals[j] = ax.height(v)
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		bars.Color, _, _ = Style(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(pn.Series)-1)/2)
		p.Add(bars)
		p.Legend.Add(s.Name, bars)
	}
	p.Y.Min, p.Y.Max = 0, ax.height(ax.top)*1.25 // room for the legend above the bars
	p.NominalX(pn.Labels...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign = -1
	p.X.Tick.Label.YAlign = -0.5
	return nil
}

func (pn Panel) lines(p *plot.Plot, ax yAxis) error {
	for i, s := range pn.Series {
		col, dash, glyph := Style(i)
		// On a log axis a value of zero has no place: the line breaks
		// there rather than plunge to the floor.
		var segments []plotter.XYs
		var pts plotter.XYs
		var cur plotter.XYs
		for j := range pn.X {
			if ax.log && s.Values[j] <= 0 {
				if len(cur) > 0 {
					segments, cur = append(segments, cur), nil
				}
				continue
			}
			pt := plotter.XY{X: pn.X[j], Y: ax.height(s.Values[j])}
			cur, pts = append(cur, pt), append(pts, pt)
		}
		if len(cur) > 0 {
			segments = append(segments, cur)
		}
		var first *plotter.Line
		for _, seg := range segments {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			l.Color, l.Dashes, l.Width = col, dash, vg.Points(1.5)
			p.Add(l)
			if first == nil {
				first = l
			}
		}
		// Glyphs on a few points each, staggered from one series to the
		// next, so that lines lying on one another can still be told
		// apart.
		step := max(len(pts)/6, 1)
		var marks plotter.XYs
		for j := (i * step / max(len(pn.Series), 1)) % step; j < len(pts); j += step {
			marks = append(marks, pts[j])
		}
		sc, err := plotter.NewScatter(marks)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(3), Shape: glyph}
		p.Add(sc)
		if first != nil {
			p.Legend.Add(s.Name, first, sc)
		} else {
			p.Legend.Add(s.Name, sc)
		}
	}
	p.Y.Min = 0
	if ax.log {
		p.Y.Max = ax.height(ax.top) * 1.05
	}
	return nil
}

// yAxis maps values to bar heights: the values themselves on a linear
// axis, or their decades above a floor on a log one (drawn with gonum's
// linear axis and ticks labelled in the values' own units, so that a bar
// starts at the floor rather than at a log of zero).
type yAxis struct {
	log   bool
	floor float64 // log: the value at height 0, a power of ten
	top   float64 // the largest value
}

func newYAxis(series []Series, log bool) yAxis {
	top, low := 0.0, math.Inf(1)
	for _, s := range series {
		for _, v := range s.Values {
			top = max(top, v)
			if v > 0 {
				low = min(low, v)
			}
		}
	}
	ax := yAxis{top: top}
	if math.IsInf(low, 1) || top <= 0 {
		return ax
	}
	if log || top/low > 100 {
		ax.log = true
		ax.floor = math.Pow(10, math.Floor(math.Log10(low)))
		if ax.floor == low {
			ax.floor /= 10 // so that the smallest bar shows
		}
	}
	return ax
}

func (ax yAxis) height(v float64) float64 {
	if !ax.log {
		return v
	}
	if v <= ax.floor {
		return 0
	}
	return math.Log10(v / ax.floor)
}

// Ticks labels the log axis at each decade, with minor ticks between.
func (ax yAxis) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Floor(lo); d <= hi; d++ {
		v := ax.floor * math.Pow(10, d)
		label := strconv.FormatFloat(v, 'g', -1, 64)
		if v >= 1 {
			label = strconv.FormatFloat(v, 'f', -1, 64)
		}
		ticks = append(ticks, plot.Tick{Value: d, Label: label})
		for m := 2.0; m < 10; m++ {
			if h := d + math.Log10(m); h <= hi {
				ticks = append(ticks, plot.Tick{Value: h})
			}
		}
	}
	return ticks
}
