package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

type benchConfig struct {
	keys     int
	duration time.Duration
	policyID string
	limit    int64
	window   time.Duration
	workers  int
	dist     string
}

func benchMain(args []string, stdout, stderr io.Writer) error {
	var c benchConfig
	fs := newFlagSet("bench", "[flags]", stderr)
	fs.IntVar(&c.keys, "keys", 1_000_000, "distinct keys in the workload")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "how long to measure, after a warm-up that touches every key once")
	fs.StringVar(&c.policyID, "policy", "sliding-counter", "policy: "+strings.Join(policyIDs, ", ")+" (as the engine supports them)")
	fs.Int64Var(&c.limit, "limit", 10, "units admitted per key per window")
	fs.DurationVar(&c.window, "window", time.Second, "the policy's window")
	fs.IntVar(&c.workers, "workers", runtime.GOMAXPROCS(0), "goroutines deciding at once; one per core by default")
	fs.StringVar(&c.dist, "dist", "uniform", "how keys are drawn: uniform, or zipf (s=1.1: a few hot keys, a long tail)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case c.keys < 1 || c.keys > 1<<30:
		return usageErr(fs, "-keys %d: must be in [1, %d]", c.keys, 1<<30)
	case c.duration <= 0:
		return usageErr(fs, "-duration %v: must be positive", c.duration)
	case c.workers < 1:
		return usageErr(fs, "-workers %d: must be at least 1", c.workers)
	case c.dist != "uniform" && c.dist != "zipf":
		return usageErr(fs, "-dist %q: must be uniform or zipf", c.dist)
	}
	p, err := buildPolicy(c.policyID, c.limit, c.window)
	if err != nil {
		return usageErr(fs, "%v", err)
	}

	var zipf []uint32
	if c.dist == "zipf" {
		zipf = zipfTable(c.keys)
	}
	heapBefore := heapAfterGC()
	lim, err := engine.New(p, engine.WithMaxKeys(max(c.keys, engine.DefaultMaxKeys)))
	if err != nil {
		return fmt.Errorf("-policy %s: %w", c.policyID, err)
	}
	defer lim.Close()

	bar := newProgress(stderr, c.duration)
	bar.phase("warming up: touching %d keys", c.keys)
	warm(lim, c.keys, c.workers)

	stats := make([]workerStats, c.workers)
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c.workers {
		wg.Go(func() { benchWorker(lim, &stats[w], &stop, uint64(w), c.keys, zipf) })
	}
	bar.run(start, func() int64 {
		var n int64
		for i := range stats {
			n += stats[i].ops.Load()
		}
		return n
	}, &stop)
	wg.Wait()
	elapsed := time.Since(start)
	bar.done()

	var ops, allowed int64
	for i := range stats {
		ops += stats[i].ops.Load()
		allowed += stats[i].allowed.Load()
	}
	keys := lim.Len()
	heap := heapAfterGC() - heapBefore
	runtime.KeepAlive(zipf)

	fmt.Fprintf(stdout, "slidelimit bench: %s, limit %d per %v, %s keys (%s), %d goroutines on %d cores, %v\n\n",
		c.policyID, c.limit, c.window, group(int64(c.keys)), c.dist, c.workers, runtime.NumCPU(), c.duration)
	perSec := float64(ops) / elapsed.Seconds()
	nsPer := float64(elapsed.Nanoseconds()) / float64(max(ops, 1))
	row := func(label, value, note string) {
		fmt.Fprintln(stdout, strings.TrimRight(fmt.Sprintf("  %-16s %14s  %s", label, value, note), " "))
	}
	row("decisions/s", group(int64(perSec)), "")
	row("ns per decision", fmt.Sprintf("%.1f", nsPer), fmt.Sprintf("(%.1f per goroutine)", nsPer*float64(c.workers)))
	row("accept rate", fmt.Sprintf("%.2f %%", 100*float64(allowed)/float64(max(ops, 1))), "")
	row("keys tracked", group(int64(keys)), "")
	if keys > 0 {
		row("bytes per key", fmt.Sprintf("%.1f", float64(heap)/float64(keys)), "(heap after GC / keys tracked)")
	}
	return nil
}

// workerStats is one worker's running totals, alone on its cache lines so that the progress bar
// reading them does not slow the workers down.
type workerStats struct {
	_       [128]byte
	ops     atomic.Int64
	allowed atomic.Int64
	_       [128]byte
}

// benchBatch is how many decisions a worker makes between looking at the stop flag and
// publishing its totals.
const benchBatch = 1024

func benchWorker(lim *engine.Limiter, st *workerStats, stop *atomic.Bool, id uint64, keys int, zipf []uint32) {
	rng := rand.NewPCG(id+1, 0x5eed)
	pos := int(rng.Uint64() % uint64(max(len(zipf), 1)))
	var ops, allowed int64
	n := uint64(keys)
	for !stop.Load() {
		for range benchBatch {
			var k uint64
			if zipf != nil {
				k = uint64(zipf[pos])
				if pos++; pos == len(zipf) {
					pos = 0
				}
			} else {
				// Lemire's multiply-shift maps 32 random bits onto [0, keys) without a division.
				k = (rng.Uint64() >> 32) * n >> 32
			}
			if lim.AllowKey(k, 1) {
				allowed++
			}
		}
		ops += benchBatch
		st.ops.Store(ops)
		st.allowed.Store(allowed)
	}
}

// warm inserts every key once, split over workers goroutines, so that the measured run decides
// on tracked keys: the steady state of a limiter in service.
func warm(lim *engine.Limiter, keys, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := keys*w/workers, keys*(w+1)/workers
		wg.Go(func() {
			for k := lo; k < hi; k++ {
				lim.AllowKey(uint64(k), 1)
			}
		})
	}
	wg.Wait()
}

// zipfTable draws a fixed sequence of key indexes from a Zipf distribution (s = 1.1), so that
// drawing is not part of what is measured.
func zipfTable(keys int) []uint32 {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(keys-1))
	t := make([]uint32, 1<<20)
	for i := range t {
		t[i] = uint32(z.Uint64())
	}
	return t
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// group formats n with thousands separators: 12345678 → "12,345,678".
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// progress draws a progress bar on stderr when stderr is a terminal, and prints plain lines
// otherwise (a log, a CI run), where carriage returns would only make a mess.
type progress struct {
	w     io.Writer
	tty   bool
	total time.Duration
}

func newProgress(w io.Writer, total time.Duration) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) phase(format string, a ...any) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s…", fmt.Sprintf(format, a...))
		return
	}
	fmt.Fprintf(p.w, format+"\n", a...)
}

// run redraws the bar every 100ms until total has passed since start, then sets stop.
func (p *progress) run(start time.Time, count func() int64, stop *atomic.Bool) {
	if !p.tty {
		fmt.Fprintf(p.w, "measuring for %v\n", p.total)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(p.total)
	defer deadline.Stop()
	for {
		select {
		case <-deadline.C:
			stop.Store(true)
			return
		case now := <-tick.C:
			if p.tty {
				p.draw(now.Sub(start), count())
			}
		}
	}
}

func (p *progress) draw(elapsed time.Duration, ops int64) {
	const width = 30
	frac := math.Min(float64(elapsed)/float64(p.total), 1)
	full := int(frac * width)
	rate := float64(ops) / math.Max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %4.1fs/%v  %s decisions/s",
		strings.Repeat("█", full), strings.Repeat("░", width-full), elapsed.Seconds(), p.total, group(int64(rate)))
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
