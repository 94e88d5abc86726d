// Command charts draws the comparison charts from Go benchmark output.
//
//	go run ./cmd/charts -o DIR FILE...
//
// It reads the files (raw `go test -bench` output of bench/peers' BenchmarkLimiters, and
// cmd/memory's -bench lines) and writes PNG files to DIR:
//
//   - throughput-keys=WORKLOAD.png for each workload with run=parallel results: decisions per
//     second (1e9 / the median ns/op) against GOMAXPROCS, one line per limiter, on a log scale;
//     from whatever -cpu values the files hold.
//   - bytes-per-key.png, when memory results are present: bytes per tracked key for each
//     limiter, one bar per key count.
//
// With -table FILE it also writes the medians as markdown tables (one row per workload and run,
// one column per limiter). With -targets FILE it also writes a markdown table of the project's performance targets, each as a ratio
// computed from the same medians, met or missed.
//
// The median of repeated results is used, as benchstat does.
package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var f flagError
		if errors.As(err, &f) {
			os.Exit(2) // the flag package has said what was wrong
		}
		fail(err)
	}
}

// usageError is a command line charts cannot run with.
type usageError string

func (u usageError) Error() string { return string(u) }

// flagError is a flag the flag package refused, having printed why.
type flagError struct{ error }

// run is the command: it reads the files args names and writes what its flags ask for, naming
// each file written on stdout.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("charts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", ".", "directory to write the PNG files to")
	targetsFile := fs.String("targets", "", "also write the performance targets, as a markdown table, to this file")
	tableFile := fs.String("table", "", "also write the medians (ns/op, allocs/op, bytes/key) as markdown tables to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return flagError{err}
	}
	if fs.NArg() == 0 {
		return usageError("usage: charts -o DIR FILE...")
	}
	d, err := read(fs.Args())
	if err != nil {
		return err
	}
	if len(d.nsPerOp) == 0 && len(d.bytesPerKey) == 0 {
		return errors.New("no BenchmarkLimiters or BenchmarkMemory results in the input")
	}
	written, err := drawAll(d, *out)
	if err != nil {
		return err
	}
	if len(written) == 0 {
		// Serial runs only: nothing to chart against GOMAXPROCS, but the tables still have rows.
		if *tableFile == "" && *targetsFile == "" {
			return errors.New("no BenchmarkLimiters run=parallel or BenchmarkMemory results in the input to chart (-table writes the medians of serial runs)")
		}
		fmt.Fprintln(stderr, "charts: no run=parallel or BenchmarkMemory results: no chart drawn")
	}
	if *tableFile != "" {
		if err := os.WriteFile(*tableFile, []byte(tables(d)), 0o644); err != nil {
			return err
		}
		written = append(written, *tableFile)
	}
	if *targetsFile != "" {
		if err := os.WriteFile(*targetsFile, []byte(targets(d)), 0o644); err != nil {
			return err
		}
		written = append(written, *targetsFile)
	}
	for _, f := range written {
		fmt.Fprintln(stdout, f)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "charts:", err)
	os.Exit(1)
}

// key identifies one result: a throughput (limiter, workload, procs) or a memory figure
// (limiter, keys label, procs 0).
type key struct {
	limiter, workload, run string
	procs                  int
}

type data struct {
	nsPerOp     map[key][]float64
	allocsPerOp map[key][]float64
	admitted    map[key][]float64
	bytesPerKey map[key][]float64
	limiters    []string // in order of first appearance
}

func (d *data) addLimiter(n string) {
	if !slices.Contains(d.limiters, n) {
		d.limiters = append(d.limiters, n)
	}
}

// read parses every file's benchmark results, keeping ns/op and bytes/key.
func read(files []string) (*data, error) {
	d := &data{nsPerOp: map[key][]float64{}, allocsPerOp: map[key][]float64{},
		admitted: map[key][]float64{}, bytesPerKey: map[key][]float64{}}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		r := benchfmt.NewReader(f, name)
		for r.Scan() {
			res, ok := r.Result().(*benchfmt.Result)
			if !ok {
				continue // syntax errors and unit metadata: not ours
			}
			base, parts := res.Name.Parts()
			cfg, procs := subConfig(parts)
			switch string(base) {
			case "Limiters":
				if cfg["run"] == "" || cfg["limiter"] == "" {
					continue
				}
				k := key{cfg["limiter"], cfg["keys"], cfg["run"], procs}
				if v, ok := value(res, "sec/op", "ns/op"); ok {
					d.nsPerOp[k] = append(d.nsPerOp[k], v)
					d.addLimiter(k.limiter)
				}
				if v, ok := value(res, "allocs/op", "allocs/op"); ok {
					d.allocsPerOp[k] = append(d.allocsPerOp[k], v)
				}
				if v, ok := value(res, "admitted/op", "admitted/op"); ok {
					d.admitted[k] = append(d.admitted[k], v)
				}
			case "Memory":
				if v, ok := value(res, "bytes/key", "bytes/key"); ok && cfg["limiter"] != "" {
					k := key{cfg["limiter"], cfg["keys"], "", 0}
					d.bytesPerKey[k] = append(d.bytesPerKey[k], v)
					d.addLimiter(k.limiter)
				}
			}
		}
		err = r.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
	}
	return d, nil
}

// subConfig splits "/k=v" parts into a map and the trailing "-N" GOMAXPROCS (1 when absent, as
// go test writes no suffix for GOMAXPROCS 1).
func subConfig(parts [][]byte) (map[string]string, int) {
	cfg := map[string]string{}
	procs := 1
	for _, p := range parts {
		s := string(p)
		switch {
		case strings.HasPrefix(s, "/"):
			if k, v, ok := strings.Cut(s[1:], "="); ok {
				cfg[k] = v
			}
		case strings.HasPrefix(s, "-"):
			if n, err := strconv.Atoi(s[1:]); err == nil {
				procs = n
			}
		}
	}
	return cfg, procs
}

// value returns the measurement in unit, converting benchfmt's normalised sec/op back to ns/op.
func value(res *benchfmt.Result, unit, orig string) (float64, bool) {
	for _, v := range res.Values {
		if v.OrigUnit == orig {
			return v.OrigValue, true
		}
		if v.Unit == unit {
			if unit == "sec/op" {
				return v.Value * 1e9, true
			}
			return v.Value, true
		}
	}
	return 0, false
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// palette gives each limiter a fixed colour, so a limiter looks the same on every chart.
var palette = []color.RGBA{
	{0x66, 0x66, 0x66, 0xff}, // floor: grey
	{0xd6, 0x27, 0x28, 0xff}, // slidelimit: red
	{0x1f, 0x77, 0xb4, 0xff},
	{0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff},
	{0x8c, 0x56, 0x4b, 0xff},
	{0x17, 0xbe, 0xcf, 0xff},
}

func drawAll(d *data, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	workloads := map[string]bool{}
	for k := range d.nsPerOp {
		if k.run == "parallel" {
			workloads[k.workload] = true
		}
	}
	for _, w := range slices.Sorted(maps.Keys(workloads)) {
		f := filepath.Join(dir, "throughput-keys="+w+".png")
		if err := throughputChart(d, w, f); err != nil {
			return nil, err
		}
		written = append(written, f)
	}
	if len(d.bytesPerKey) > 0 {
		f := filepath.Join(dir, "bytes-per-key.png")
		if err := memoryChart(d, f); err != nil {
			return nil, err
		}
		written = append(written, f)
	}
	return written, nil
}

func throughputChart(d *data, workload, file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Decisions per second, keys=%s, RunParallel (median)", workload)
	p.X.Label.Text = "cores (GOMAXPROCS)"
	p.Y.Label.Text = "decisions/s (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Points(6)
	var procsSeen []int
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, lim := range d.limiters {
		var xys plotter.XYs
		for k, v := range d.nsPerOp {
			if k.limiter == lim && k.workload == workload && k.run == "parallel" {
				y := 1e9 / median(v)
				lo, hi = math.Min(lo, y), math.Max(hi, y)
				xys = append(xys, plotter.XY{X: float64(k.procs), Y: y})
				if !slices.Contains(procsSeen, k.procs) {
					procsSeen = append(procsSeen, k.procs)
				}
			}
		}
		if len(xys) == 0 {
			continue
		}
		sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := palette[i%len(palette)]
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		if lim == "floor" {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		if lim == "slidelimit" {
			line.Width = vg.Points(3)
		}
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(lim, line, points)
	}
	sort.Ints(procsSeen)
	var ticks []plot.Tick
	for _, n := range procsSeen {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(procsSeen) > 0 {
		p.X.Min, p.X.Max = float64(procsSeen[0])-0.5, float64(procsSeen[len(procsSeen)-1])+0.5
	}
	// Whole decades, with room above the top line for the legend.
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(hi)+0.3))
	p.Y.Tick.Marker = rateTicks{}
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}

// rateTicks marks 1, 2 and 5 times each power of ten, labelled "100k", "2M", "50M".
type rateTicks struct{}

func (rateTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < min || v > max {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: rateLabel(v)})
		}
	}
	return ts
}

func rateLabel(v float64) string {
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', -1, 64) + "G"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func memoryChart(d *data, file string) error {
	counts := map[string]bool{}
	for k := range d.bytesPerKey {
		counts[k.workload] = true
	}
	labels := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return keysValue(a) - keysValue(b) })
	var names []string
	for _, lim := range d.limiters {
		for k := range d.bytesPerKey {
			if k.limiter == lim {
				names = append(names, lim)
				break
			}
		}
	}
	p := plot.New()
	p.Title.Text = "Heap bytes per tracked key (after runtime.GC)"
	p.Y.Label.Text = "bytes/key"
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Points(6)
	w := vg.Points(22)
	ymax := 0.0
	for j, label := range labels {
		vals := make(plotter.Values, len(names))
		for i, lim := range names {
			if v, ok := d.bytesPerKey[key{lim, label, "", 0}]; ok {
				vals[i] = median(v)
				ymax = math.Max(ymax, vals[i])
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Offset = w * vg.Length(float64(j)-float64(len(labels)-1)/2)
		c := palette[(2+j*2)%len(palette)]
		bars.Color = c
		bars.LineStyle.Width = 0
		p.Add(bars)
		p.Legend.Add("keys="+label, bars)
		// Print each bar's value above it, so the chart can be read without a ruler.
		var xys plotter.XYs
		var texts []string
		for i, v := range vals {
			if v > 0 {
				xys = append(xys, plotter.XY{X: float64(i), Y: v})
				texts = append(texts, strconv.FormatFloat(v, 'f', 0, 64))
			}
		}
		lbls, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return err
		}
		for i := range lbls.TextStyle {
			lbls.TextStyle[i].XAlign = draw.XCenter
			lbls.TextStyle[i].YAlign = draw.YBottom
		}
		lbls.Offset = vg.Point{X: bars.Offset}
		p.Add(lbls)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min = 0
	p.Y.Max = ymax * 1.15
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}

// keysValue orders key-count labels such as "1M", "10M", "500k".
func keysValue(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "M"):
		mult, s = 1_000_000, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "k"):
		mult, s = 1000, strings.TrimSuffix(s, "k")
	}
	n, _ := strconv.Atoi(s)
	return n * mult
}
