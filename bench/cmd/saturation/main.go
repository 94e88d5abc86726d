// Command saturation measures how well the engine's coarse clock holds when every P is busy: one
// goroutine, under GOMAXPROCS=1 by default, calls Allow on one key in a tight loop, so the
// clock's background goroutine runs only when the scheduler preempts the busy one.
//
//	go run ./cmd/saturation [-policy sliding-counter|fixed-window] [-limit 1000] [-window 10ms]
//	                        [-duration 3s] [-procs 1] [-target 0.97]
//
// A limiter that decides at the right time admits, under a flood, about its limit per window:
// limit × elapsed / window in all. The program prints the admitted units as a fraction of that
// figure (a clock that lags makes windows roll late and the fraction fall), and the lag of the
// shared clock's reading behind time.Now, sampled every 4096 calls (median and maximum).
//
// The fixed window's ceiling is about 1 (a little above: a run of d spans one more aligned window
// than d/window, so a 1s run of 10ms windows can reach 1.01). The sliding counter's is lower for short windows, whatever the
// clock: time is whole milliseconds, so in a window's last ms a tenth of a 10ms window's previous
// count is still carried, and a flood settles at limit/(1 + 1/10) per window, 0.909 of the limit.
// So the program also runs the same policy on a manual clock stepped exactly one ms at a time,
// with as many calls per ms as the real run made (no more than limit+1: the rest would be refused
// alike), and prints the ratio of the two: how much of what a perfect clock would admit the real
// clock admitted. It exits with status 1 when that ratio is below -target.
//
// The loop can only be admitted while the operating system runs it: on a machine shared with
// other work the fraction falls with the process's share of a CPU, which the program prints as
// the process's CPU time over the wall time (getrusage).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

func main() {
	pol := flag.String("policy", "sliding-counter", "sliding-counter or fixed-window")
	limit := flag.Int64("limit", 1000, "limit per window")
	window := flag.Duration("window", 10*time.Millisecond, "window (whole ms)")
	duration := flag.Duration("duration", 3*time.Second, "how long the loop runs")
	procs := flag.Int("procs", 1, "GOMAXPROCS for the run")
	target := flag.Float64("target", 0.97, "the least admitted fraction that passes")
	flag.Parse()
	var p policy.Policy
	var err error
	if flag.NArg() > 0 { // the flag package stops at the first non-flag: every flag after it is lost
		err = fmt.Errorf("unexpected argument %q", flag.Arg(0))
	} else if err = validate(*limit, *window, *duration, *procs, *target); err == nil {
		// After validate, whose errors name the flags: the policy's own name its fields.
		p, err = policyFor(*pol, *limit, *window)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "saturation:", err)
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*procs)
	r, err := run(p, *duration)
	if err != nil {
		fmt.Fprintln(os.Stderr, "saturation:", err)
		os.Exit(2)
	}
	perMs := min(r.calls/max(r.elapsed.Milliseconds(), 1), *limit+1)
	ideal, err := perfect(p, perMs, r.elapsed.Milliseconds())
	if err != nil {
		fmt.Fprintln(os.Stderr, "saturation:", err)
		os.Exit(2)
	}
	expected := float64(*limit) * float64(r.elapsed) / float64(*window)
	frac, ceiling := float64(r.admitted)/expected, float64(ideal)/expected
	ratio := frac / ceiling
	fmt.Printf("# saturation: %s %s/%s, GOMAXPROCS %d, %s limit %d per %v, one goroutine for %v\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), p.ID(), *limit, *window, r.elapsed.Round(time.Millisecond))
	fmt.Printf("calls              %d (%.1f ns each)\n", r.calls, float64(r.elapsed.Nanoseconds())/float64(r.calls))
	fmt.Printf("admitted           %d of %.0f (limit × elapsed / window)\n", r.admitted, expected)
	fmt.Printf("clock lag          median %d ms, p99 %d ms, max %d ms; %.1f%% of %d samples within 1 ms\n",
		r.lagMedian, r.lagP99, r.lagMax, 100*r.within1, r.samples)
	fmt.Printf("CPU share          %.3f (process CPU time / wall time)\n", r.cpu.Seconds()/r.elapsed.Seconds())
	fmt.Printf("admitted fraction  %.3f\n", frac)
	fmt.Printf("perfect clock      %.3f (the same policy, %d calls per exact ms)\n", ceiling, perMs)
	verdict := "ok"
	if ratio < *target {
		verdict = "BELOW TARGET"
	}
	fmt.Printf("real / perfect     %.3f (target >= %.2f): %s\n", ratio, *target, verdict)
	if ratio < *target {
		os.Exit(1)
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func policyFor(name string, limit int64, window time.Duration) (policy.Policy, error) {
	var p policy.Policy
	switch name {
	case "sliding-counter":
		p = policy.SlidingCounter{Limit: limit, Window: window}
	case "fixed-window":
		p = policy.FixedWindow{Limit: limit, Window: window}
	default:
		return nil, fmt.Errorf("-policy %q: want sliding-counter or fixed-window", name)
	}
	return p, p.Validate()
}

// perfect is what a limiter of policy p admits on a clock stepped exactly one ms at a time, given
// perMs calls in each of ms milliseconds.
func perfect(p policy.Policy, perMs, ms int64) (int64, error) {
	clk := clock.NewManual(time.Now().UnixMilli())
	l, err := engine.New(p, engine.WithClock(clk))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	var admitted int64
	for range ms {
		for range perMs {
			if l.Allow("k") {
				admitted++
			}
		}
		clk.Advance(time.Millisecond)
	}
	return admitted, nil
}

// maxProcs bounds -procs: far past any machine's cores, which the run means to saturate.
const maxProcs = 1024

func validate(limit int64, window, duration time.Duration, procs int, target float64) error {
	switch {
	case limit < 1:
		return fmt.Errorf("-limit %d: must be at least 1", limit)
	case window < time.Millisecond || window%time.Millisecond != 0:
		return fmt.Errorf("-window %v: must be a whole number of milliseconds, at least 1ms", window)
	case duration < 10*window:
		return fmt.Errorf("-duration %v: must be at least ten windows (%v)", duration, 10*window)
	case procs < 1 || procs > maxProcs:
		// Each P busy-loops a goroutine of its own: a hundred thousand never finished starting.
		return fmt.Errorf("-procs %d: must be in [1, %d]", procs, maxProcs)
	case !(target >= 0 && target <= 1): // so written that NaN fails it too
		return fmt.Errorf("-target %v: must be in [0, 1]", target)
	}
	return nil
}

type result struct {
	calls, admitted   int64
	elapsed, cpu      time.Duration
	lagMedian, lagMax int64
	lagP99            int64
	within1           float64
	samples           int
}

// run floods one key of a limiter on the shared coarse clock for d. The loop reads time.Now only
// every 4096 calls, to sample the clock's lag and to stop, so that the loop itself gives the
// scheduler no reason to run the clock's goroutine.
func run(p policy.Policy, d time.Duration) (result, error) {
	l, err := engine.New(p)
	if err != nil {
		return result{}, err
	}
	defer l.Close()
	clk := clock.Acquire() // the limiter's own clock: the shared one
	defer clock.Release(clk)
	var r result
	var lags []int64
	cpu0 := cpuTime()
	start := time.Now()
	end := start.Add(d)
	for {
		for range 4096 {
			if l.Allow("k") {
				r.admitted++
			}
		}
		r.calls += 4096
		now := time.Now()
		lags = append(lags, now.UnixMilli()-clk.Now())
		if !now.Before(end) {
			r.elapsed, r.cpu = now.Sub(start), cpuTime()-cpu0
			break
		}
	}
	slices.Sort(lags)
	r.samples, r.lagMedian, r.lagMax = len(lags), lags[len(lags)/2], lags[len(lags)-1]
	r.lagP99 = lags[len(lags)*99/100]
	within, _ := slices.BinarySearch(lags, 2) // lags of 0 or 1 ms
	r.within1 = float64(within) / float64(len(lags))
	return r, nil
}
