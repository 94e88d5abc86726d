package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docRows is a fixed result set in the shape of a real run: four modes, one without Redis
// commands counted, one over-admitting.
var docRows = []row{
	{"engine", result{decisions: 6027213, elapsed: 3 * time.Second, p99: 341 * time.Nanosecond, admitted: 14601, exact: 14711, under: 110, cmds: -1}},
	{"exact", result{decisions: 57708, elapsed: 3 * time.Second, p99: 3904511 * time.Nanosecond, admitted: 12610, exact: 12616, under: 6, cmds: 57731}},
	{"batched", result{decisions: 13553208, elapsed: 3 * time.Second, p99: 321 * time.Nanosecond, admitted: 15641, exact: 15666, under: 25, cmds: 9487}},
	{"gubernator", result{decisions: 17724, elapsed: 3 * time.Second, p99: 17902346 * time.Nanosecond, admitted: 12478, exact: 12014, over: 485, under: 21, cmds: -1}},
}

func decodePNG(t *testing.T, file string) image.Image {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return img
}

// countColor counts the pixels of exactly c: bars are filled with flat colours that nothing else
// on the chart uses.
func countColor(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
				n++
			}
		}
	}
	return n
}

func TestChartDrawsEveryMode(t *testing.T) {
	file := filepath.Join(t.TempDir(), "fleet.png")
	if err := writeChart(file, "test workload", docRows); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, file)
	if got := img.Bounds().Size(); got != (image.Point{960, 672}) {
		t.Fatalf("chart is %v pixels, want 960×672 (10×7 in at 96 dpi)", got)
	}
	// Each mode has a bar in the throughput and latency panels (the Redis modes one more in the
	// commands panel), each 48 pixels wide and at least a decade (some 40 pixels) tall: thousands
	// of pixels per mode, where anti-aliased text alone leaves under a hundred.
	for _, w := range docRows {
		if n := countColor(img, modeColor(w.mode)); n < 5000 {
			t.Errorf("mode %s: %d pixels of its colour, want bars (≥ 5000)", w.mode, n)
		}
	}
	// The legend's swatches are some 340 pixels each. Gubernator over-admits 4%, most of the
	// panel's height; the under-admission bars are short, 0.05% to 0.75%.
	if n := countColor(img, overColor); n < 2000 {
		t.Errorf("over-admission: %d pixels of its colour, want gubernator's bar (≥ 2000)", n)
	}
	if n := countColor(img, underColor); n < 1000 {
		t.Errorf("under-admission: %d pixels of its colour, want bars (≥ 1000)", n)
	}
}

// The same chart without gubernator has no over-admission bar: only the legend's swatch is left
// in that colour.
func TestChartOverAdmissionFollowsData(t *testing.T) {
	dir := t.TempDir()
	with, without := filepath.Join(dir, "with.png"), filepath.Join(dir, "without.png")
	if err := writeChart(with, "", docRows); err != nil {
		t.Fatal(err)
	}
	if err := writeChart(without, "", docRows[:3]); err != nil {
		t.Fatal(err)
	}
	a, b := countColor(decodePNG(t, with), overColor), countColor(decodePNG(t, without), overColor)
	if b >= a/2 {
		t.Fatalf("over-admission colour: %d pixels with gubernator's 4%%, %d without any: the bar does not follow the data", a, b)
	}
}

func TestChartNeedsResults(t *testing.T) {
	if err := writeChart(filepath.Join(t.TempDir(), "x.png"), "", nil); err == nil {
		t.Fatal("no rows: want an error")
	}
}

func TestLabels(t *testing.T) {
	for v, want := range map[float64]string{4517736: "4.52M", 19236: "19.2k", 1000.4: "1k", 0.7: "0.7", 100: "100", 0.01: "0.01", 5908: "5.91k"} {
		if got := siLabel(v); got != want {
			t.Errorf("siLabel(%v) = %q, want %q", v, got, want)
		}
	}
	for ns, want := range map[float64]string{321: "321ns", 3904511: "3.9ms", 17902346: "17.9ms", 1000: "1µs", 2.5e9: "2.5s"} {
		if got := durLabel(ns); got != want {
			t.Errorf("durLabel(%v) = %q, want %q", ns, got, want)
		}
	}
}

// -chart is checked before any mode runs, and a run writes it.
func TestRunWritesChart(t *testing.T) {
	cfg := config{duration: 200 * time.Millisecond, keys: 2, limit: 30, window: time.Second, goroutines: 2, modes: []string{"engine"}}
	cfg.chart = filepath.Join(t.TempDir(), "fleet.txt")
	if err := checkFlags(cfg); err == nil {
		t.Fatal("-chart without .png: want an error")
	}
	cfg.chart = filepath.Join(t.TempDir(), "missing", "fleet.png")
	if err := checkFlags(cfg); err == nil {
		t.Fatal("-chart in a missing directory: want an error")
	}
	cfg.chart = filepath.Join(t.TempDir(), "fleet.png")
	bogus := cfg
	bogus.modes = []string{"engine", "bogus"}
	if err := checkFlags(bogus); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("-modes engine,bogus: error %v, want one naming the mode", err)
	}
	// The policy's own bounds, before the table's header is printed.
	for _, bad := range []config{{window: 0, limit: 30}, {window: 1500 * time.Microsecond, limit: 30}, {window: time.Second, limit: 99999999999}} {
		c := cfg
		c.window, c.limit = bad.window, bad.limit
		if err := checkFlags(c); err == nil || !strings.Contains(err.Error(), "-limit ") || !strings.Contains(err.Error(), "-window ") {
			t.Fatalf("-limit %d -window %v: error %v, want one naming both flags", bad.limit, bad.window, err)
		}
	}
	if err := checkFlags(cfg); err != nil {
		t.Fatal(err)
	}
	if err := run(cfg); err != nil {
		t.Fatal(err)
	}
	if got := decodePNG(t, cfg.chart).Bounds().Dx(); got != 960 {
		t.Fatalf("chart width %d, want 960", got)
	}
}
