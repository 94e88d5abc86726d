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
	// reference also measures mutexMapLimiter on the same workload.
	reference bool
}

func benchMain(args []string, stdout, stderr io.Writer) error {
	var c benchConfig
	fs := newFlagSet("bench", "[flags]", stderr)
	fs.IntVar(&c.keys, "keys", 1_000_000, "distinct keys in the workload")
	durationVar(fs, &c.duration, "duration", 3*time.Second, "how long (a `duration`) to measure each limiter, after a warm-up that touches every key once")
	fs.StringVar(&c.policyID, "policy", "sliding-counter", "policy: "+strings.Join(policyIDs, ", "))
	fs.Int64Var(&c.limit, "limit", 10, "units admitted per key per window")
	durationVar(fs, &c.window, "window", time.Second, "the policy's window, a `duration`")
	fs.IntVar(&c.workers, "workers", runtime.GOMAXPROCS(0), "goroutines deciding at once; one per core by default")
	fs.StringVar(&c.dist, "dist", "uniform", "how keys are drawn: uniform, or zipf (s=1.1: a few hot keys, a long tail)")
	fs.BoolVar(&c.reference, "reference", true, "also measure a mutex-guarded map of sliding-window counters on the same workload, and compare")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case c.keys < 1 || c.keys > 1<<30:
		return usageErr(fs, "-keys %d: must be in [1, %d]", c.keys, 1<<30)
	case c.duration < time.Millisecond:
		return usageErr(fs, "-duration %v: must be at least 1ms", typed(&c.duration))
	case c.workers < 1 || c.workers > maxWorkers:
		return usageErr(fs, "-workers %d: must be in [1, %d]", c.workers, maxWorkers)
	case c.dist != "uniform" && c.dist != "zipf":
		return usageErr(fs, "-dist %q: must be uniform or zipf", c.dist)
	}
	p, err := buildPolicy(c.policyID, c.limit, &c.window)
	if err != nil {
		return usageErr(fs, "%v", err)
	}

	var zipf []uint32
	if c.dist == "zipf" {
		zipf = zipfTable(c.keys)
	}
	rounds, total := 1, c.duration
	if c.reference {
		// Rounded up without adding, and doubled short of overflow: -duration may be as long
		// as a Duration holds.
		rounds, total = max(int(c.duration/benchRound), 1), c.duration+min(c.duration, math.MaxInt64-c.duration)
		if c.duration > benchRound && c.duration%benchRound != 0 {
			rounds++
		}
	}
	bar := newProgress(stderr, total)

	// The reference is built and warmed first, so that the engine's keys are as fresh as its own
	// when the measuring starts: keys idle through a long warm-up would be evicted meanwhile.
	heapStart := heapAfterGC()
	var res, refRes benchResult
	var ref *mutexMapLimiter
	if c.reference {
		// What a service often writes first: the same rules, a map behind one sync.Mutex.
		ref = newMutexMapLimiter(c.limit, c.window.Milliseconds(), c.keys)
		bar.phase("reference: warming up, touching %s keys", group(int64(c.keys)))
		warm(nil, ref, c.keys, c.workers)
		refRes.heap = growth(heapStart, heapAfterGC())
	}
	lim, err := engine.New(p, engine.WithMaxKeys(max(c.keys, engine.DefaultMaxKeys)))
	if err != nil {
		return fmt.Errorf("-policy %s: %w", c.policyID, err)
	}
	defer lim.Close()
	bar.phase("slidelimit: warming up, touching %s keys", group(int64(c.keys)))
	warm(lim, nil, c.keys, c.workers)
	res.heap, res.heapKeys = growth(heapStart+refRes.heap, heapAfterGC()), lim.Len()
	if c.reference {
		refRes.heapKeys = ref.len()
	}

	// The two take turns, so that a machine whose speed drifts (other work, frequency scaling)
	// slows both alike.
	if c.reference {
		bar.phase("measuring for %v per limiter, in %d rounds each, taking turns", c.duration, rounds)
	} else {
		bar.phase("measuring for %v", c.duration)
	}
	round := c.duration / time.Duration(rounds)
	for i := range rounds {
		if i == rounds-1 {
			round = c.duration - round*time.Duration(rounds-1)
		}
		res.add(measure(c, bar, round, zipf, lim, nil))
		if c.reference {
			refRes.add(measure(c, bar, round, zipf, nil, ref))
		}
	}
	bar.done()
	if res.ops == 0 || (c.reference && refRes.ops == 0) {
		return fmt.Errorf("no decision was made within -duration %v: nothing to report", c.duration)
	}
	res.keys = lim.Len()
	if c.reference {
		refRes.keys = ref.len()
	}
	runtime.KeepAlive(ref)
	runtime.KeepAlive(zipf)
	return writeReport(stdout, func(stdout io.Writer) {
		report(stdout, c, res, refRes, rounds)
	})
}

// writeReport writes a report through write and returns the first error a write to w returned:
// a report that was not written is a failure (exit 1), as the other commands' output is.
func writeReport(w io.Writer, write func(io.Writer)) error {
	fw := &firstErr{w: w}
	write(fw)
	if fw.err != nil {
		return fmt.Errorf("writing the report: %w", fw.err)
	}
	return nil
}

// report writes bench's results, and the reference's when it was measured.
func report(stdout io.Writer, c benchConfig, res, refRes benchResult, rounds int) {
	fmt.Fprintf(stdout, "slidelimit bench: %s, limit %d per %v, %s keys (%s), %d goroutines on %d cores, %v\n\n",
		c.policyID, c.limit, c.window, group(int64(c.keys)), c.dist, c.workers, runtime.NumCPU(), c.duration)
	row := func(label, value, note string) {
		fmt.Fprintln(stdout, strings.TrimRight(fmt.Sprintf("  %-16s %12s  %s", label, value, note), " "))
	}
	res.print(row, c.workers, c.keys)
	gone := c.keys - res.keys
	switch {
	case gone > 0:
		fmt.Fprintf(stdout, "\n  Keys tracked are the keys with live state at the end of the run. Every key was offered in\n"+
			"  the warm-up; the other %s had had no request for long enough that their state was the\n"+
			"  same as a new key's (for the sliding counter: no request in this window or the one before),\n"+
			"  so the sweeper evicted them, which changes no decision. Integer keys practically never share a counter\n"+
			"  (only the two whose remixes are 0 and 1 do): none is lost to a hash collision, and nothing is sampled.\n", group(int64(gone)))
	default:
		fmt.Fprintf(stdout, "\n  Keys tracked are the keys with live state at the end of the run: all %s offered. A key with\n"+
			"  no request for long enough that its state is a new key's (for the sliding counter: none in\n"+
			"  its current window or the one before) is evicted, which changes no decision.\n", group(int64(c.keys)))
	}
	if !c.reference {
		return
	}

	fmt.Fprintf(stdout, "\nreference, measured just now on the same keys and goroutines: a map of sliding-window counters\n"+
		"behind one sync.Mutex, time.Now per decision, never forgetting a key, limit %d per %v; the two took\n"+
		"turns, %d rounds each\n", c.limit, c.window, rounds)
	if c.policyID != "sliding-counter" {
		fmt.Fprintf(stdout, "(the reference decides by the sliding counter, not %s: their accept rates differ)\n", c.policyID)
	}
	fmt.Fprintln(stdout)
	refRes.print(row, c.workers, c.keys)

	ratio := res.perSec() / max(refRes.perSec(), 1)
	fmt.Fprintf(stdout, "\nsummary: slidelimit made %.1f× the decisions per second of a mutex-guarded map of counters measured just now", ratio)
	if res.heapKeys > 0 && refRes.heapKeys > 0 && res.heap > 0 && refRes.heap > 0 {
		fmt.Fprintf(stdout, ", at %.2f× its bytes per key", res.bytesPerKey()/refRes.bytesPerKey())
	}
	fmt.Fprintln(stdout)
}

// maxWorkers bounds -workers: each goroutine keeps its own counters, and far more goroutines than
// cores measure the scheduler, not the limiter.
const maxWorkers = 1 << 16

// benchResult is one limiter's run.
type benchResult struct {
	ops, allowed int64
	elapsed      time.Duration
	keys         int    // keys tracked at the end
	heap         uint64 // heap growth after GC, once the warm-up has touched every key
	heapKeys     int    // keys tracked at that moment
}

// add counts round q into r.
func (r *benchResult) add(q benchResult) {
	r.ops += q.ops
	r.allowed += q.allowed
	r.elapsed += q.elapsed
}

func (r benchResult) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r benchResult) bytesPerKey() float64 { return float64(r.heap) / float64(max(r.heapKeys, 1)) }

// print writes one row per metric, each with one figure.
func (r benchResult) print(row func(label, value, note string), workers, offered int) {
	row("decisions/s", group(int64(r.perSec())), "all goroutines together")
	row("ns per decision", fmt.Sprintf("%.1f", float64(r.elapsed.Nanoseconds())*float64(workers)/float64(max(r.ops, 1))),
		"one goroutine's time per decision")
	row("accept rate", fmt.Sprintf("%.2f %%", 100*float64(r.allowed)/float64(max(r.ops, 1))), "")
	// No note on this row: the paragraph under the table explains it.
	row("keys tracked", group(int64(r.keys)), "")
	if r.heapKeys > 0 {
		note := "heap growth after GC / keys, every key tracked"
		if r.heapKeys < offered {
			// A window shorter than the warm-up lets the sweeper evict its first keys before it ends.
			note = fmt.Sprintf("heap growth after GC / the %s keys tracked then, of %s offered", group(int64(r.heapKeys)), group(int64(offered)))
		}
		if r.heap == 0 {
			// With few keys the rest of the heap's noise can hide their share: 0.0 would be false.
			row("bytes per key", "-", "heap growth after GC too small to measure with this few keys")
		} else {
			row("bytes per key", fmt.Sprintf("%.1f", r.bytesPerKey()), note)
		}
	}
}

// benchRound is the longest turn a limiter takes when the reference is measured too: short
// against the default one-second window, so that a key's wait through the other limiter's turn
// hardly changes whether it outlives its window.
const benchRound = 250 * time.Millisecond

// measure runs c.workers goroutines deciding on lim (or else ref) for d.
func measure(c benchConfig, bar *progress, d time.Duration, zipf []uint32, lim *engine.Limiter, ref *mutexMapLimiter) benchResult {
	stats := make([]workerStats, c.workers)
	var stop atomic.Bool
	var wg sync.WaitGroup
	// The workers start together once all exist, and each stops at the deadline by itself: with
	// thousands of them, a worker already running kept this goroutine from starting the rest,
	// and from setting stop, for seconds past d.
	gate := make(chan struct{})
	var start, end time.Time
	for w := range c.workers {
		wg.Go(func() {
			<-gate
			benchWorker(lim, ref, &stats[w], &stop, end, batchFor(c.workers), uint64(w), c.keys, zipf)
		})
	}
	start = time.Now()
	end = start.Add(d)
	close(gate)
	bar.run(start, d, func() int64 {
		var n int64
		for i := range stats {
			n += stats[i].ops.Load()
		}
		return n
	}, &stop)
	wg.Wait()
	r := benchResult{elapsed: time.Since(start)}
	for i := range stats {
		r.ops += stats[i].ops.Load()
		r.allowed += stats[i].allowed.Load()
	}
	return r
}

// workerStats is one worker's running totals, alone on its cache lines so that the progress bar
// reading them does not slow the workers down.
type workerStats struct {
	_       [128]byte
	ops     atomic.Int64
	allowed atomic.Int64
	_       [128]byte
}

// benchBatch is how many decisions a worker makes between looking at the stop flag and the
// clock and publishing its totals; with many workers, fewer (batchFor), so that the decisions
// every worker makes before it first looks stay about 2^20, a fraction of a second.
const benchBatch = 1024

func batchFor(workers int) int { return min(benchBatch, max(16, (1<<20)/max(workers, 1))) }

// benchWorker decides on lim, or else on ref: both are called directly (a branch that always goes
// the same way costs next to nothing), so that neither pays for an indirect call.
func benchWorker(lim *engine.Limiter, ref *mutexMapLimiter, st *workerStats, stop *atomic.Bool, end time.Time, batch int, id uint64, keys int, zipf []uint32) {
	rng := rand.NewPCG(id+1, 0x5eed)
	pos := int(rng.Uint64() % uint64(max(len(zipf), 1)))
	var ops, allowed int64
	n := uint64(keys)
	for !stop.Load() {
		for range batch {
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
			var ok bool
			if lim != nil {
				ok = lim.AllowKey(k, 1)
			} else {
				ok = ref.allow(k)
			}
			if ok {
				allowed++
			}
		}
		ops += int64(batch)
		st.ops.Store(ops)
		st.allowed.Store(allowed)
		if !time.Now().Before(end) {
			return
		}
	}
}

// warm inserts every key once, split over workers goroutines, so that the measured run decides
// on tracked keys: the steady state of a limiter in service.
func warm(lim *engine.Limiter, ref *mutexMapLimiter, keys, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := keys*w/workers, keys*(w+1)/workers
		wg.Go(func() {
			for k := lo; k < hi; k++ {
				if lim != nil {
					lim.AllowKey(uint64(k), 1)
				} else {
					ref.allow(uint64(k))
				}
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

// growth is the heap's growth from before to after, 0 if it shrank: with few keys the noise of
// the rest of the heap (the collector's own buffers, the progress line) can exceed the keys' share.
func growth(before, after uint64) uint64 {
	if after < before {
		return 0
	}
	return after - before
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
// otherwise (a log, a CI run), where carriage returns would only make a mess. The bar covers total,
// the sum of every measured stretch.
type progress struct {
	w     io.Writer
	tty   bool
	total time.Duration
	spent time.Duration // measured before the current stretch
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

// run redraws the bar every 100ms until d has passed since start, then sets stop.
func (p *progress) run(start time.Time, d time.Duration, count func() int64, stop *atomic.Bool) {
	defer func() { p.spent += d }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(d)
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

// draw shows the whole run's progress and the current stretch's rate.
func (p *progress) draw(elapsed time.Duration, ops int64) {
	const width = 30
	done := p.spent + elapsed
	frac := math.Min(float64(done)/float64(p.total), 1)
	full := int(frac * width)
	rate := float64(ops) / math.Max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %4.1fs/%v  %s decisions/s",
		strings.Repeat("█", full), strings.Repeat("░", width-full), done.Seconds(), p.total, group(int64(rate)))
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
