// Command churn measures how slidelimit's memory behaves when a burst of distinct keys comes and
// goes, and what its background sweeper costs while it holds many live keys.
//
//	go run ./cmd/churn [-keys 10000000] [-window 2s] [-steady 300] [-cpuwindow 1s] [-quiet 10s]
//	                   [-part 1|2|both] [-cpuprofile FILE]
//
// Part 1, the burst. A limiter with its defaults (eviction on, the shared coarse clock) and the
// sliding counter at 2^20 per -window serves -steady keys (a few hundred) at a steady pace
// throughout. After one window the live heap is measured (runtime.GC, then MemStats.HeapAlloc):
// the starting size. Then -keys distinct keys arrive, paced evenly over three windows (as fast as
// the machine allows, if that is slower), one request each, from GOMAXPROCS goroutines. After
// the burst only the steady keys remain; the live heap is measured every quarter window, and the
// program reports whether, and when, it fell back to within 10% of the starting size, and whether
// that was within three windows of the burst's end (it keeps measuring for up to ten windows, so
// that a miss still says by how much).
//
// Part 2, the sweeper's CPU. A second limiter with the same policy at -cpuwindow, but on a manual
// clock that never moves, is given -keys distinct keys, which therefore stay live: the sweeper
// visits every one of them once per sweep period (the window, but at least 2s and at most a minute) and can evict none.
// Then nothing else runs for -quiet, and the process's CPU time (getrusage: user + system) over
// that time, divided by the wall time, is the sweeper's share of one core. The same quiet period
// is measured again after Close has stopped the sweeper (the keys still held) as a control: what
// the Go runtime costs by itself.
//
// A short window keeps the run to a minute or two; the sweeper's period, and so its CPU, is the
// same for every window up to 1s, and smaller for longer windows.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slidelimit/slidelimit/bench/peers"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

func main() {
	keys := flag.Int("keys", 10_000_000, "distinct keys in the burst")
	window := flag.Duration("window", 2*time.Second, "sliding-counter window for the burst (part 1)")
	steady := flag.Int("steady", 300, "keys that keep coming before, during and after the burst")
	cpuWindow := flag.Duration("cpuwindow", time.Second, "window for the sweeper-CPU measurement (part 2)")
	quiet := flag.Duration("quiet", 10*time.Second, "quiet period over which the sweeper's CPU is measured")
	part := flag.String("part", "both", `which part to run: "1" (the burst), "2" (the sweeper's CPU) or "both"`)
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of part 2's quiet period (the sweeper) to this file")
	flag.Parse()

	if flag.NArg() > 0 { // the flag package stops at the first non-flag: every flag after it is lost
		fail(fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	if err := validate(*keys, *steady, *window, *cpuWindow, *quiet, *part); err != nil {
		fail(err)
	}
	if *cpuProfile != "" {
		// Its directory is checked now, not after part 1 has run for minutes.
		if fi, err := os.Stat(filepath.Dir(*cpuProfile)); err != nil || !fi.IsDir() {
			fail(fmt.Errorf("-cpuprofile %q: no directory %s to write it in", *cpuProfile, filepath.Dir(*cpuProfile)))
		}
	}
	fmt.Printf("# churn: %s %s/%s, GOMAXPROCS %d, %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.GOMAXPROCS(0), time.Now().UTC().Format(time.RFC3339))
	if *part != "2" {
		burst(*keys, *steady, *window)
	}
	if *part != "1" {
		sweeperCPU(*keys, *cpuWindow, *quiet, *cpuProfile)
	}
}

// validate checks the flags, naming the one at fault.
func validate(keys, steady int, window, cpuWindow, quiet time.Duration, part string) error {
	switch {
	case steady < 1 || steady >= peers.MaxKeys:
		return fmt.Errorf("-steady = %d: must be in [1, %d]", steady, peers.MaxKeys-1)
	case keys < 1 || keys > peers.MaxKeys-steady: // not keys+steady, which can wrap
		return fmt.Errorf("-keys = %d: keys plus -steady must be in [1, %d]", keys, peers.MaxKeys)
	case window < 100*time.Millisecond || window%time.Millisecond != 0:
		return fmt.Errorf("-window = %v: must be a whole number of ms, at least 100ms", window)
	case cpuWindow < time.Millisecond || cpuWindow%time.Millisecond != 0:
		return fmt.Errorf("-cpuwindow = %v: must be a whole number of ms, at least 1ms", cpuWindow)
	case quiet < time.Second:
		return fmt.Errorf("-quiet = %v: must be at least 1s", quiet)
	case part != "1" && part != "2" && part != "both":
		return fmt.Errorf(`-part = %q: must be "1", "2" or "both"`, part)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "churn:", err)
	os.Exit(2)
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// burst runs part 1.
func burst(keys, steady int, window time.Duration) {
	l, err := engine.New(policy.SlidingCounter{Limit: 1 << 20, Window: window})
	if err != nil {
		fail(err)
	}
	defer l.Close()

	// The steady keys: each requested about every 10ms by one goroutine, for the whole run.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		names := make([]string, steady)
		for i := range names {
			names[i] = string(peers.AppendKey(nil, uint32(peers.MaxKeys-1-i)))
		}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				for _, k := range names {
					l.Allow(k)
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	time.Sleep(window)
	var st engine.Stats
	start := liveHeap()
	l.Stats(&st)
	fmt.Printf("\n## part 1: %d keys over three %v windows, then %d steady keys\n", keys, window, steady)
	fmt.Printf("start: live heap %.2f MiB, keys %d, table %.2f MiB, shards %d\n",
		mib(start), st.Keys, mib(st.TableBytes), st.Shards)

	// The burst: GOMAXPROCS goroutines take key numbers from a shared counter, never running
	// ahead of an even pace over three windows.
	began := time.Now()
	span := 3 * window
	var next atomic.Int64
	workers := runtime.GOMAXPROCS(0)
	var bw sync.WaitGroup
	for range workers {
		bw.Add(1)
		go func() {
			defer bw.Done()
			var buf []byte
			for {
				allowed := int64(float64(keys) * float64(time.Since(began)) / float64(span))
				i := next.Add(1) - 1
				if i >= int64(keys) {
					return
				}
				if i >= allowed {
					time.Sleep(time.Duration(float64(i-allowed+1) / float64(keys) * float64(span)))
				}
				buf = peers.AppendKey(buf[:0], uint32(i))
				l.Allow(string(buf))
			}
		}()
	}
	bw.Wait()
	ended := time.Now()
	l.Stats(&st)
	peakKeys := st.Keys
	fmt.Printf("burst: %d keys in %v (%.2f windows); keys tracked at its end %d, table %.1f MiB\n",
		keys, ended.Sub(began).Round(time.Millisecond), float64(ended.Sub(began))/float64(window),
		st.Keys, mib(st.TableBytes))

	fmt.Printf("%10s %12s %12s %12s %12s\n", "after", "heap MiB", "vs start", "keys", "evicted")
	backAt := time.Duration(-1)
	var lastHeap uint64
	const maxSteps = 4 * 10 // ten windows at most
	for step := 0; step <= maxSteps; step++ {
		time.Sleep(time.Until(ended.Add(time.Duration(step) * window / 4)))
		h := liveHeap()
		since := time.Since(ended)
		l.Stats(&st)
		lastHeap = h
		fmt.Printf("%9.2fw %12.2f %11.2fx %12d %12d\n", float64(since)/float64(window), mib(h),
			float64(h)/float64(start), st.Keys, st.Evicted)
		if backAt < 0 && float64(h) <= 1.1*float64(start) {
			backAt = since
		}
		if backAt >= 0 && since >= backAt+window {
			break // back, and stayed back for a window
		}
	}
	fmt.Printf("peak keys %d; ", peakKeys)
	switch {
	case backAt < 0:
		fmt.Printf("RESULT heap: NOT back within 10%% of its start (%.2f MiB) within ten windows; last %.2f MiB (%.2fx) (target 3 windows: missed)\n",
			mib(start), mib(lastHeap), float64(lastHeap)/float64(start))
	default:
		w := float64(backAt) / float64(window)
		verdict := "met"
		if w > 3 {
			verdict = "missed"
		}
		fmt.Printf("RESULT heap: back within 10%% of its start %.2f windows after the burst (target 3: %s)\n", w, verdict)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quietShare returns the process's CPU time over d, as a share of one core.
func quietShare(d time.Duration) float64 {
	c0, t0 := cpuTime(), time.Now()
	time.Sleep(d)
	c1, t1 := cpuTime(), time.Now()
	return float64(c1-c0) / float64(t1.Sub(t0))
}

// sweeperCPU runs part 2.
func sweeperCPU(keys int, window, quiet time.Duration, profile string) {
	runtime.GC()
	clk := clock.NewManual(time.Now().UnixMilli())
	l, err := engine.New(policy.SlidingCounter{Limit: 1 << 20, Window: window}, engine.WithClock(clk))
	if err != nil {
		fail(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := next.Add(1) - 1; i < int64(keys); i = next.Add(1) - 1 {
				buf = peers.AppendKey(buf[:0], uint32(i))
				l.Allow(string(buf))
			}
		}()
	}
	wg.Wait()
	var st engine.Stats
	l.Stats(&st)
	heap := liveHeap()
	time.Sleep(time.Second) // let the inserts' garbage collection and scavenging settle
	fmt.Printf("\n## part 2: sweeper CPU with %d live keys (window %v, clock frozen so none dies)\n", st.Keys, window)
	fmt.Printf("live heap %.1f MiB (%.1f B/key), table %.1f MiB\n", mib(heap), float64(heap)/float64(st.Keys), mib(st.TableBytes))
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
	}
	on := quietShare(quiet)
	if profile != "" {
		pprof.StopCPUProfile()
	}
	evictedDuring := func() int64 { var s engine.Stats; l.Stats(&s); return s.Evicted }()
	l.Close()
	off := quietShare(quiet)
	runtime.KeepAlive(l)
	fmt.Printf("process CPU over %v quiet: sweeper running %.2f%% of one core; after Close (control) %.2f%%; evicted %d\n",
		quiet, 100*on, 100*off, evictedDuring)
	verdict := "met"
	if on >= 0.02 {
		verdict = "missed"
	}
	fmt.Printf("RESULT sweeper CPU: %.2f%% of one core with %d live keys (target < 2%%: %s)\n", 100*on, st.Keys, verdict)
}
