package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// row is one mode's result, as the table and the chart both show it.
type row struct {
	mode string
	result
}

func (w row) rate() float64 { return float64(w.decisions) / w.elapsed.Seconds() }

// cmdsPer1k is the Redis commands per 1,000 decisions; false for a mode that talks to no Redis.
func (w row) cmdsPer1k() (float64, bool) {
	if w.cmds < 0 || w.decisions == 0 {
		return 0, false
	}
	return float64(w.cmds) * 1000 / float64(w.decisions), true
}

func (w row) overPct() float64  { return pct(w.over, w.exact) }
func (w row) underPct() float64 { return pct(w.under, w.exact) }

// The chart's size: 10 × 7 inches at vgimg's 96 dpi, 960 × 672 pixels.
const (
	chartW = 10 * vg.Inch
	chartH = 7 * vg.Inch
)

// modeColors gives each mode the same colour in every panel; slidelimit's batched mode is the
// red one, as slidelimit is on the peer charts.
var modeColors = map[string]color.RGBA{
	"engine":     {0x66, 0x66, 0x66, 0xff},
	"exact":      {0x1f, 0x77, 0xb4, 0xff},
	"batched":    {0xd6, 0x27, 0x28, 0xff},
	"gubernator": {0xff, 0x7f, 0x0e, 0xff},
}

var (
	overColor  = color.RGBA{0x94, 0x67, 0xbd, 0xff}
	underColor = color.RGBA{0x2c, 0xa0, 0x2c, 0xff}
)

func modeColor(mode string) color.RGBA {
	if c, ok := modeColors[mode]; ok {
		return c
	}
	return color.RGBA{0x8c, 0x56, 0x4b, 0xff}
}

// writeChart draws rows as a PNG of four panels, the table's columns: decisions/s, p99 latency
// and Redis commands per 1,000 decisions (log scales), and over- and under-admission as a share
// of what an exact fleet-wide count admits. header is printed above the panels.
func writeChart(file, header string, rows []row) error {
	if len(rows) == 0 {
		return errors.New("chart: no results to draw")
	}
	names := make([]string, len(rows))
	for i, w := range rows {
		names[i] = w.mode
	}
	rates, p99s, cmds := make([]float64, len(rows)), make([]float64, len(rows)), make([]float64, len(rows))
	rateLbl, p99Lbl, cmdLbl := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, w := range rows {
		rates[i], rateLbl[i] = w.rate(), siLabel(w.rate())
		p99s[i], p99Lbl[i] = float64(w.p99.Nanoseconds()), durLabel(float64(w.p99.Nanoseconds()))
		if c, ok := w.cmdsPer1k(); ok {
			cmds[i], cmdLbl[i] = c, strconv.FormatFloat(c, 'f', 1, 64)
		} else {
			cmds[i], cmdLbl[i] = math.NaN(), "no Redis"
		}
	}
	panels := make([]*plot.Plot, 0, 4)
	for _, spec := range []struct {
		title  string
		vals   []float64
		labels []string
		tick   func(float64) string
	}{
		{"Decisions per second (log scale)", rates, rateLbl, siLabel},
		{"p99 latency of a decision (log scale)", p99s, p99Lbl, durLabel},
		{"Redis commands per 1,000 decisions (log scale)", cmds, cmdLbl, siLabel},
	} {
		p, err := logBarPlot(spec.title, names, spec.vals, spec.labels, spec.tick)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	p, err := admissionPlot(rows, names)
	if err != nil {
		return err
	}
	panels = append(panels, p)

	img := vgimg.New(chartW, chartH)
	dc := draw.New(img)
	head := plot.New().Title.TextStyle
	head.Font.Size = vg.Points(11)
	head.XAlign, head.YAlign = draw.XCenter, draw.YTop
	dc.FillText(head, vg.Point{X: chartW / 2, Y: chartH - vg.Points(6)}, header)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadTop: vg.Points(26), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(10), PadX: vg.Points(18), PadY: vg.Points(14)}
	for i, p := range panels {
		p.Draw(tiles.At(dc, i%2, i/2))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: writing %s: %w", file, err)
	}
	return f.Close()
}

// logBarPlot draws one bar per mode on a log scale, each labelled with its value; a NaN value
// draws no bar, only its label at the foot.
func logBarPlot(title string, names []string, vals []float64, labels []string, tick func(float64) string) (*plot.Plot, error) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = decadeTicks{tick}
	// Whole decades: one below the lowest bar, so that it shows, and room above the highest for
	// its label.
	yMin := math.Pow(10, math.Floor(math.Log10(lo))-1)
	yMax := math.Pow(10, math.Ceil(math.Log10(hi)+0.35))
	bars := logBars{vals: vals, names: names, width: vg.Points(36)}
	p.Add(plotter.NewGrid(), bars)
	var xys plotter.XYs
	for i, v := range vals {
		y := v
		if !(v > 0) {
			y = yMin
		}
		xys = append(xys, plotter.XY{X: float64(i), Y: y})
	}
	lbls, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range lbls.TextStyle {
		lbls.TextStyle[i].XAlign, lbls.TextStyle[i].YAlign = draw.XCenter, draw.YBottom
	}
	lbls.Offset = vg.Point{Y: vg.Points(2)}
	p.Add(lbls)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min, p.Y.Max = yMin, yMax
	return p, nil
}

// logBars fills a bar from the foot of the axis to each value, which plotter.BarChart cannot on
// a log scale (its bars start at zero).
type logBars struct {
	vals  []float64
	names []string
	width vg.Length
}

func (b logBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	foot := trY(p.Y.Min)
	for i, v := range b.vals {
		if !(v > 0) {
			continue
		}
		x, top := trX(float64(i)), trY(v)
		c.FillPolygon(modeColor(b.names[i]), c.ClipPolygonXY([]vg.Point{
			{X: x - b.width/2, Y: foot}, {X: x + b.width/2, Y: foot},
			{X: x + b.width/2, Y: top}, {X: x - b.width/2, Y: top},
		}))
	}
}

// admissionPlot draws over- and under-admitted units per mode, each as a share of what an exact
// fleet-wide count admits on that mode's requests.
func admissionPlot(rows []row, names []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Admission error, % of the exact fleet-wide count"
	p.Y.Label.Text = "%"
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Points(6)
	p.Add(plotter.NewGrid())
	w := vg.Points(22)
	ymax := 0.0
	for j, s := range []struct {
		name string
		c    color.RGBA
		f    func(row) float64
	}{
		{"over-admitted", overColor, row.overPct},
		{"under-admitted", underColor, row.underPct},
	} {
		vals := make(plotter.Values, len(rows))
		texts := make([]string, len(rows))
		var xys plotter.XYs
		for i, r := range rows {
			vals[i] = s.f(r)
			ymax = math.Max(ymax, vals[i])
			texts[i] = strconv.FormatFloat(vals[i], 'f', 2, 64)
			xys = append(xys, plotter.XY{X: float64(i), Y: vals[i]})
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.Offset = w * vg.Length(float64(j)-0.5)
		bars.Color = s.c
		bars.LineStyle.Width = 0
		p.Add(bars)
		p.Legend.Add(s.name, bars)
		lbls, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return nil, err
		}
		for i := range lbls.TextStyle {
			lbls.TextStyle[i].XAlign, lbls.TextStyle[i].YAlign = draw.XCenter, draw.YBottom
			lbls.TextStyle[i].Font.Size = vg.Points(8)
		}
		lbls.Offset = vg.Point{X: bars.Offset, Y: vg.Points(2)}
		p.Add(lbls)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min = 0
	// Room above the tallest bar for its label and the legend; 1% at least, so that a run with
	// no error at all still has an axis.
	p.Y.Max = math.Max(1, ymax*1.35)
	return p, nil
}

// decadeTicks marks each power of ten, labelled by label.
type decadeTicks struct{ label func(float64) string }

func (d decadeTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Ceil(math.Log10(min) - 1e-9); e <= math.Floor(math.Log10(max)+1e-9); e++ {
		v := math.Pow(10, e)
		ts = append(ts, plot.Tick{Value: v, Label: d.label(v)})
	}
	return ts
}

// siLabel writes v with k, M or G, to three significant figures: "4.52M", "19.2k", "0.7".
func siLabel(v float64) string {
	for _, u := range []struct {
		div float64
		sfx string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= u.div {
			return sig3(v/u.div) + u.sfx
		}
	}
	return sig3(v)
}

// durLabel writes a duration given in nanoseconds to three significant figures: "321ns",
// "3.9ms".
func durLabel(ns float64) string {
	for _, u := range []struct {
		div float64
		sfx string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}} {
		if ns >= u.div {
			return sig3(ns/u.div) + u.sfx
		}
	}
	return sig3(ns) + "ns"
}

// sig3 writes v to three significant figures, never in exponent form, without trailing zeros.
func sig3(v float64) string {
	if v == 0 {
		return "0"
	}
	d := max(0, 2-int(math.Floor(math.Log10(math.Abs(v)))))
	s := strconv.FormatFloat(v, 'f', d, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// chartHeader describes the workload above the panels.
func chartHeader(cfg config, gomaxprocs int) string {
	return fmt.Sprintf("bench/fleet: %d processes × %d goroutines, closed loop, %d keys, fleet-wide limit %d per %v per key, %v per mode, GOMAXPROCS %d",
		procs, cfg.goroutines, cfg.keys, cfg.limit, cfg.window, cfg.duration.Round(time.Millisecond), gomaxprocs)
}
