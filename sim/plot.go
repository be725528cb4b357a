package sim

import (
	"fmt"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Series is one named row of values in a chart, one value per label.
type Series struct {
	Name   string
	Values []float64
}

// checkPlotFile accepts .svg and .png.
func checkPlotFile(file string) error {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("plot: %q must end in .svg or .png", file)
}

// BarChart draws grouped bars: one group per label, one bar per series.
func BarChart(file, title, ylabel string, labels []string, series []Series) error {
	if err := checkPlotFile(file); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	width := vg.Points(max(6, 48/float64(max(len(series), 1))))
	for i, s := range series {
		bars, err := plotter.NewBarChart(plotter.Values(s.Values), width)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(bars)
		p.Legend.Add(s.Name, bars)
	}
	p.Legend.Top = true
	top := 0.0
	for _, s := range series {
		for _, v := range s.Values {
			top = max(top, v)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.25 // room for the legend above the bars
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign = -1
	p.X.Tick.Label.YAlign = -0.5
	w := vg.Length(max(16, len(labels)*len(series))) * vg.Centimeter * 0.6
	return p.Save(min(max(w, 16*vg.Centimeter), 40*vg.Centimeter), 12*vg.Centimeter, file)
}

// LineChart draws one line per series over x.
func LineChart(file, title, xlabel, ylabel string, x []float64, series []Series) error {
	if err := checkPlotFile(file); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	for i, s := range series {
		pts := make(plotter.XYs, len(x))
		for j := range x {
			pts[j].X, pts[j].Y = x[j], s.Values[j]
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	p.Legend.Top = true
	return p.Save(18*vg.Centimeter, 12*vg.Centimeter, file)
}
