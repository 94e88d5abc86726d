package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/policy"
)

func ratioBreaker(t *testing.T, b BreakerRatio) *breaker {
	t.Helper()
	cfg := defaultConfig()
	if err := WithBreakerRatio(b)(&cfg); err != nil {
		t.Fatal(err)
	}
	return newBreaker(cfg)
}

// TestBreakerRatioRule drives the ratio rule within one window (an hour, so nothing slides out).
func TestBreakerRatioRule(t *testing.T) {
	b := ratioBreaker(t, BreakerRatio{Window: time.Hour})
	for i := range DefaultBreakerMinCalls - 1 {
		b.failure(false)
		if b.open() {
			t.Fatalf("opened after %d failures, fewer than MinCalls %d", i+1, DefaultBreakerMinCalls)
		}
	}
	b.failure(false)
	if !b.open() || b.opens.Load() != 1 {
		t.Fatalf("%d failures out of %d calls did not open it", DefaultBreakerMinCalls, DefaultBreakerMinCalls)
	}

	b = ratioBreaker(t, BreakerRatio{Window: time.Hour})
	for range 10 {
		b.success(false)
	}
	for i := range 9 {
		b.failure(false)
		if b.open() {
			t.Fatalf("opened at %d failures out of %d calls, below half", i+1, 11+i)
		}
	}
	b.failure(false)
	if !b.open() {
		t.Fatal("10 failures out of 20 calls did not open it")
	}
	// A successful probe closes it and starts a clean window.
	b.base = b.base.Add(-time.Hour) // as if opened an hour ago: the cooldown is over
	ok, probe, _ := b.allow()
	if !ok || !probe {
		t.Fatalf("no probe after the cooldown: ok %v probe %v", ok, probe)
	}
	if ok, _, _ := b.allow(); ok {
		t.Fatal("a second call went through while the probe was out")
	}
	b.success(true)
	b.failure(false)
	if b.open() {
		t.Fatal("one failure after closing reopened it: the window was not cleared")
	}
}

// TestBreakerStragglerDoesNotClose: a call that went out before the breaker opened and succeeds
// after it did leaves it open; only the probe, after the cooldown, closes it.
func TestBreakerStragglerDoesNotClose(t *testing.T) {
	cfg := defaultConfig()
	if err := WithBreaker(1, time.Hour)(&cfg); err != nil {
		t.Fatal(err)
	}
	b := newBreaker(cfg)
	b.failure(false)
	if !b.open() {
		t.Fatal("1 failure did not open a breaker of threshold 1")
	}
	b.success(false)
	if !b.open() {
		t.Fatal("a straggler's success closed the breaker before its cooldown")
	}
	if ok, _, wait := b.allow(); ok || wait <= 0 {
		t.Fatalf("allow after the straggler = %v, wait %v; want refused with a wait", ok, wait)
	}
	b.base = b.base.Add(-time.Hour)
	if ok, probe, _ := b.allow(); !ok || !probe {
		t.Fatalf("no probe after the cooldown: ok %v probe %v", ok, probe)
	}
	b.success(true)
	if b.open() {
		t.Fatal("the probe's success did not close it")
	}
}

// TestBreakerConsecutiveRule is WithBreaker's rule: threshold consecutive failures.
func TestBreakerConsecutiveRule(t *testing.T) {
	cfg := defaultConfig()
	if err := WithBreaker(3, time.Second)(&cfg); err != nil {
		t.Fatal(err)
	}
	b := newBreaker(cfg)
	b.failure(false)
	b.failure(false)
	b.success(false)
	b.failure(false)
	b.failure(false)
	if b.open() {
		t.Fatal("opened without 3 consecutive failures")
	}
	b.failure(false)
	if !b.open() {
		t.Fatal("3 consecutive failures did not open it")
	}
}

// TestBreakerFatalBackoff: an error every key gets opens at once, whatever the ratio, and each
// failed probe doubles the cooldown up to the cap.
func TestBreakerFatalBackoff(t *testing.T) {
	b := ratioBreaker(t, BreakerRatio{Cooldown: time.Millisecond})
	b.fatal(false)
	if !b.open() {
		t.Fatal("a fatal error did not open the breaker")
	}
	for i := range 10 {
		b.fatal(true)
		want := min(int64(2)<<i, maxFatalBackoff) * int64(time.Millisecond)
		if got := b.curCool.Load(); got != want {
			t.Fatalf("after %d failed probes the cooldown is %v, want %v", i+1, time.Duration(got), time.Duration(want))
		}
	}
	b.success(true)
	if b.open() || b.curCool.Load() != int64(time.Millisecond) {
		t.Fatalf("a success did not close it and reset the cooldown: open %v, cooldown %v", b.open(), time.Duration(b.curCool.Load()))
	}
}

// stallResult is what one load run saw around a pause of the server.
type stallResult struct {
	calls, failed int64         // calls during the measured span; those decided by the failure choice
	opened        time.Duration // from the pause to the breaker opening; -1 if it never did
	waited        int64         // calls that failed by waiting out the timeout
}

// runStall runs 8 closed-loop callers against a fresh server with the limiter's options, pauses
// the server for stall, and measures until after the span.
func runStall(t *testing.T, stall, span time.Duration, opts ...Option) stallResult {
	t.Helper()
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := New(client, "stall", policy.SlidingCounter{Limit: 1 << 30, Window: time.Minute}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var measuring, stop atomic.Bool
	var calls, failed, waited atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			key := fmt.Sprint("k", g)
			for i := 0; i < 1_000_000 && !stop.Load(); i++ {
				start := time.Now()
				_, err := l.Take(context.Background(), key, 1)
				if measuring.Load() {
					calls.Add(1)
					if err != nil {
						failed.Add(1)
						if time.Since(start) >= DefaultTimeout/2 {
							waited.Add(1)
						}
					}
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // warm: connections open, breaker window full of successes
	warm := statsOf(l)
	measuring.Store(true)
	t0 := time.Now()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	opened := time.Duration(-1)
	for time.Since(t0) < stall {
		if opened < 0 && statsOf(l).BreakerOpens > warm.BreakerOpens {
			opened = time.Since(t0)
		}
		time.Sleep(time.Millisecond)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	for time.Since(t0) < span {
		if opened < 0 && statsOf(l).BreakerOpens > warm.BreakerOpens {
			opened = time.Since(t0)
		}
		time.Sleep(time.Millisecond)
	}
	measuring.Store(false)
	stop.Store(true)
	wg.Wait()
	if warm.Failures > 0 {
		t.Logf("%d of %d calls failed before the pause (a loaded machine's timeouts)", warm.Failures, warm.RoundTrips)
	}
	return stallResult{calls: calls.Load(), failed: failed.Load(), opened: opened, waited: waited.Load()}
}

// TestBreakerDefaults measures the default breaker (and timeout) against the consecutive one of
// earlier releases (threshold 1, 500ms cooldown) on a real server under fail-open, where every
// call the failure choice decides is an admission not decided by Redis (counted there only if the
// stalled server runs the call once it resumes; a call the open breaker decides never reaches it):
//   - a single 80ms stall: the default must not open, and must leave fewer uncounted admissions;
//   - a 1.5s outage: the default must open, within its window plus slack.
func TestBreakerDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("timing measurement")
	}
	const stall, span = 80 * time.Millisecond, 700 * time.Millisecond
	def := runStall(t, stall, span)
	old := runStall(t, stall, span, WithBreaker(1, 500*time.Millisecond))
	t.Logf("80ms stall, %v measured, 8 callers, fail-open: default breaker: %d of %d calls uncounted (%d waited the timeout), opened after %v; "+
		"consecutive(1, 500ms): %d of %d uncounted (%d waited), opened after %v",
		span, def.failed, def.calls, def.waited, def.opened, old.failed, old.calls, old.waited, old.opened)
	if def.opened >= 0 {
		t.Errorf("an 80ms stall opened the default breaker (after %v)", def.opened)
	}
	if def.failed >= old.failed {
		t.Errorf("the default breaker left %d uncounted admissions after an 80ms stall, the consecutive one %d", def.failed, old.failed)
	}
	out := runStall(t, 1500*time.Millisecond, 1500*time.Millisecond)
	t.Logf("1.5s outage, default breaker: opened after %v; %d of %d calls uncounted, %d of them waited the %v timeout",
		out.opened, out.failed, out.calls, out.waited, DefaultTimeout)
	if out.opened < 0 || out.opened > DefaultBreakerWindow+500*time.Millisecond {
		t.Errorf("a 1.5s outage opened the default breaker after %v, want within %v plus slack", out.opened, DefaultBreakerWindow)
	}
}

// A FailClosed refusal's RetryAfter is the time left until the breaker next tries Redis: a call
// already waiting on Redis when another opened the breaker is told what is left of the cooldown,
// not all of it.
func TestFailClosedRetryAfterIsWhatIsLeft(t *testing.T) {
	srv := startServer(t)
	const timeout, cooldown = 200 * time.Millisecond, 500 * time.Millisecond
	l, err := New(newClient(t, srv.Addr), "left", policy.FixedWindow{Limit: 100, Window: time.Minute},
		WithTimeout(timeout), WithBreaker(1, cooldown), WithOnFailure(FailClosed), WithOnError(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	warmThenPause(t, srv, l)
	var first, second slidelimit.Decision
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); first, _ = l.Take(context.Background(), "a", 1) }()
	go func() {
		defer wg.Done()
		time.Sleep(timeout * 3 / 4) // sent while the first waits; it times out after the first opened the breaker
		second, _ = l.Take(context.Background(), "b", 1)
	}()
	wg.Wait()
	if first.Allowed || second.Allowed {
		t.Fatalf("FailClosed admitted: %+v, %+v", first, second)
	}
	if first.RetryAfter > cooldown || first.RetryAfter < cooldown-timeout/4 {
		t.Errorf("the call that opened the breaker: RetryAfter %v, want about the cooldown %v", first.RetryAfter, cooldown)
	}
	if second.RetryAfter >= first.RetryAfter-timeout/4 {
		t.Errorf("the call that failed %v after the breaker opened: RetryAfter %v, want what is left of %v", timeout/2, second.RetryAfter, cooldown)
	}
}
