package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
pkg: github.com/slidelimit/slidelimit/bench/peers
BenchmarkLimiters/limiter=floor/keys=1/run=serial-2 	 100	 10.0 ns/op	 1.000 admitted/op
BenchmarkLimiters/limiter=slidelimit/keys=1/run=serial-2 	 100	 14.0 ns/op	 1.000 admitted/op
BenchmarkLimiters/limiter=slidelimit/keys=1/run=serial-2 	 100	 12.0 ns/op	 1.000 admitted/op
BenchmarkLimiters/limiter=slidelimit/keys=1/run=serial-2 	 100	 16.0 ns/op	 1.000 admitted/op
BenchmarkLimiters/limiter=httprate/keys=1/run=serial-2 	 100	 100.0 ns/op	 1.000 admitted/op
BenchmarkLimiters/limiter=ulule/keys=1/run=serial-2 	 100	 50.0 ns/op	 1.000 admitted/op
BenchmarkLimiters/limiter=floor/keys=1M-uniform/run=parallel 	 100	 100.0 ns/op
BenchmarkLimiters/limiter=floor/keys=1M-uniform/run=parallel-2 	 100	 50.0 ns/op
BenchmarkLimiters/limiter=slidelimit/keys=1M-uniform/run=parallel 	 100	 200.0 ns/op
BenchmarkLimiters/limiter=slidelimit/keys=1M-uniform/run=parallel-2 	 100	 125.0 ns/op
BenchmarkLimiters/limiter=httprate/keys=1M-uniform/run=parallel 	 100	 600.0 ns/op
BenchmarkLimiters/limiter=httprate/keys=1M-uniform/run=parallel-2 	 100	 500.0 ns/op
BenchmarkMemory/limiter=slidelimit/keys=1M 1 20.0 bytes/key 20000000 heap-B
BenchmarkMemory/limiter=httprate/keys=1M 1 36.0 bytes/key 36000000 heap-B
BenchmarkMemory/limiter=slidelimit/keys=10M 1 22.5 bytes/key 225000000 heap-B
BenchmarkMemory/limiter=httprate/keys=10M 1 30.0 bytes/key 300000000 heap-B
`

func readSample(t *testing.T) *data {
	t.Helper()
	f := filepath.Join(t.TempDir(), "bench.txt")
	require.NoError(t, os.WriteFile(f, []byte(sample), 0o644))
	d, err := read([]string{f})
	require.NoError(t, err)
	return d
}

func TestReadKeepsEveryResultByName(t *testing.T) {
	d := readSample(t)
	require.Equal(t, []string{"floor", "slidelimit", "httprate", "ulule"}, d.limiters)
	require.Equal(t, []float64{14, 12, 16}, d.nsPerOp[key{"slidelimit", "1", "serial", 2}])
	require.Equal(t, []float64{200}, d.nsPerOp[key{"slidelimit", "1M-uniform", "parallel", 1}])
	require.Equal(t, []float64{22.5}, d.bytesPerKey[key{"slidelimit", "10M", "", 0}])
}

func TestTargets(t *testing.T) {
	got := targets(readSample(t))
	for _, line := range []string{
		// hot key: median 14 ns against the floor's 10: 1.4x, within 1.5x.
		"| ≤ 1.5× floor | keys=1 serial-2 | 14.0 ns | floor 10.0 ns | 1.40× | ≤ 1.5× | met |",
		// the fastest peer is ulule at 50 ns: 3.57x, short of 5x.
		"| ≥ 5× fastest peer | keys=1 serial-2 | 14.0 ns | ulule 50.0 ns | 3.57× | ≥ 5× | **missed** |",
		"| ≤ 1.5× floor | keys=1M-uniform parallel-2 | 125.0 ns | floor 50.0 ns | 2.50× | ≤ 1.5× | **missed** |",
		"| ≥ 3× fastest peer | keys=1M-uniform parallel-2 | 125.0 ns | httprate 500.0 ns | 4.00× | ≥ 3× | met |",
		// 200 ns at one core, 125 at two: 1.6x the throughput; 16 cores were not measured.
		"| ≥ 12× scaling 1→16 cores | keys=1M-uniform parallel | 1→2 cores | | 1.60× | ≥ 12× | not measurable here (largest GOMAXPROCS 2; ideal 2×) |",
		"| ≤ 2/3 smallest peer's bytes/key | keys=1M | 20.0 B | httprate 36.0 B | 0.56× | ≤ 0.67× | met |",
		"| ≤ 2/3 smallest peer's bytes/key | keys=10M | 22.5 B | httprate 30.0 B | 0.75× | ≤ 0.67× | **missed** |",
	} {
		require.Contains(t, got, line)
	}
}

func TestDrawWritesPNGs(t *testing.T) {
	dir := t.TempDir()
	files, err := drawAll(readSample(t), dir)
	require.NoError(t, err)
	require.Equal(t, []string{
		filepath.Join(dir, "throughput-keys=1M-uniform.png"),
		filepath.Join(dir, "bytes-per-key.png"),
	}, files)
	for _, f := range files {
		r, err := os.Open(f)
		require.NoError(t, err)
		img, err := png.Decode(r)
		r.Close()
		require.NoError(t, err, f)
		require.Greater(t, img.Bounds().Dx(), 400)
	}
}

func TestRateLabel(t *testing.T) {
	for v, want := range map[float64]string{500: "500", 2000: "2k", 5e6: "5M", 1e9: "1G"} {
		require.Equal(t, want, rateLabel(v))
	}
	var labels []string
	for _, tk := range (rateTicks{}).Ticks(1e6, 2e7) {
		labels = append(labels, tk.Label)
	}
	require.Equal(t, "1M 2M 5M 10M 20M", strings.Join(labels, " "))
}

func TestTables(t *testing.T) {
	got := tables(readSample(t))
	require.Contains(t, got, "| workload | run | cores | floor | slidelimit | httprate | ulule |")
	// slidelimit's three hot-key results, 14, 12 and 16 ns: the median is 14.
	require.Contains(t, got, "| keys=1 | serial | 2 | 10.0 | 14.0 | 100.0 | 50.0 |")
	require.Contains(t, got, "| keys=1M-uniform | parallel | 1 | 100.0 | 200.0 | 600.0 | – |")
	require.Contains(t, got, "at least 1.0000 of the requests")
	require.Contains(t, got, "| slidelimit | 20.0 | 22.5 |")
}

// Serial results alone draw no chart, but -table still writes their medians; with neither a chart
// nor a table to write, or no results at all, the command fails and says why.
func TestRunSerialOnly(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "serial.txt")
	var serial []string
	for _, l := range strings.Split(sample, "\n") {
		if !strings.Contains(l, "run=parallel") && !strings.HasPrefix(l, "BenchmarkMemory") {
			serial = append(serial, l)
		}
	}
	require.NoError(t, os.WriteFile(in, []byte(strings.Join(serial, "\n")), 0o644))
	table := filepath.Join(dir, "table.md")
	var out, errs strings.Builder
	require.NoError(t, run([]string{"-o", dir, "-table", table, in}, &out, &errs))
	require.Equal(t, table+"\n", out.String())
	require.Contains(t, errs.String(), "no chart drawn")
	b, err := os.ReadFile(table)
	require.NoError(t, err)
	require.Contains(t, string(b), "| keys=1 | serial | 2 | 10.0 | 14.0 | 100.0 | 50.0 |")

	err = run([]string{"-o", dir, in}, &out, &errs)
	require.ErrorContains(t, err, "-table writes the medians of serial runs")

	empty := filepath.Join(dir, "empty.txt")
	require.NoError(t, os.WriteFile(empty, []byte("goos: linux\nPASS\n"), 0o644))
	err = run([]string{"-o", dir, "-table", table, empty}, &out, &errs)
	require.ErrorContains(t, err, "no BenchmarkLimiters or BenchmarkMemory results")
}

// A flag the flag package refuses is a usage error, which main exits 2 on.
func TestRunBadFlag(t *testing.T) {
	var out, errs strings.Builder
	err := run([]string{"-x"}, &out, &errs)
	var f flagError
	require.ErrorAs(t, err, &f)
	require.Contains(t, errs.String(), "flag provided but not defined: -x")
}
