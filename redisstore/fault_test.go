package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

const (
	// Longer than the 50ms default, so that a loaded 2-core machine under -race does not time out
	// healthy calls before the fault.
	faultTimeout  = 250 * time.Millisecond
	faultCooldown = 100 * time.Millisecond
	faultWorkers  = 8
	faultOutage   = 800 * time.Millisecond
	recoveryBound = 10 * time.Second
	// A call must return within its deadline plus this slack: a correctness bound, not a speed
	// claim. The client's own read and write timeouts are 30s, so a call that did not honour the
	// limiter's deadline would take 30s; the slack only absorbs scheduling stalls of a loaded
	// 2-core machine under -race (up to 1.3s seen).
	faultSlack = 2500 * time.Millisecond
)

type faultCall struct {
	phase   int32 // when the call started: 0 healthy, 1 outage, 2 recovering
	end     time.Time
	latency time.Duration
	d       engine.Decision
	err     error
}

func startServer(t *testing.T) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(float64(len(s))*p), len(s)-1)]
}

// TestFaults kills (SIGKILL), pauses (SIGSTOP), restarts (SIGKILL then a fresh, empty server) or
// locks (a password set and every connection dropped: each call then gets NOAUTH) a real
// redis-server under load from 8 goroutines and checks, for each failure choice: every call
// returns within its deadline plus slack and with the choice's decision; the breaker keeps
// almost all calls off the failed server; the limiter recovers when the server returns; no
// goroutine is left behind. It reports p50, p99 and max latency during the outage, how many
// outage decisions honoured the failure choice, and the goroutines before and after.
func TestFaults(t *testing.T) {
	for _, fault := range []string{"SIGKILL", "SIGSTOP", "restart", "wrong-password"} {
		for _, mode := range []OnFailure{FailOpen, FailClosed, FailFallback} {
			t.Run(fault+"/fail-"+mode.String(), func(t *testing.T) { runFault(t, fault, mode) })
		}
	}
}

func runFault(t *testing.T, fault string, mode OnFailure) {
	leaks := goleak.IgnoreCurrent()
	goroutinesBefore := runtime.NumGoroutine()
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32, DisableIdentity: true, ContextTimeoutEnabled: true,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	p := policy.SlidingCounter{Limit: 1_000_000, Window: time.Second}
	opts := []Option{WithTimeout(faultTimeout), WithBreaker(1, faultCooldown), WithOnFailure(mode)}
	var fb *engine.Limiter
	if mode == FailFallback {
		var err error
		if fb, err = engine.New(policy.SlidingCounter{Limit: 5, Window: time.Second}); err != nil {
			t.Fatal(err)
		}
		opts = append(opts, WithFallback(fb))
	}
	l, err := New(client, "fault", p, opts...)
	if err != nil {
		t.Fatal(err)
	}

	var phase atomic.Int32
	var stop atomic.Bool
	var mu sync.Mutex
	var calls []faultCall
	var wg sync.WaitGroup
	for g := range faultWorkers {
		wg.Go(func() {
			key := fmt.Sprint("k", g)
			var local []faultCall
			// Bounded in count as well as by the stop flag.
			for i := 0; i < 200_000 && !stop.Load(); i++ {
				ph := phase.Load()
				start := time.Now()
				d, err := l.Take(context.Background(), key, 1)
				end := time.Now()
				local = append(local, faultCall{phase: ph, end: end, latency: end.Sub(start), d: d, err: err})
				// A little think time, as a real caller has, so that 8 spinning goroutines do not
				// starve the server on a 2-core machine.
				time.Sleep(20 * time.Microsecond)
			}
			mu.Lock()
			calls = append(calls, local...)
			mu.Unlock()
		})
	}

	time.Sleep(150 * time.Millisecond)
	before := statsOf(l)
	faultAt := time.Now()
	phase.Store(1)
	switch fault {
	case "SIGKILL", "restart":
		srv.Kill()
	case "SIGSTOP":
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	case "wrong-password":
		lockServer(t, srv.Addr)
	}
	if fault == "restart" {
		// Restarted at once, empty: the outage is the restart itself plus the breaker's cooldown.
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(faultOutage)
	during := statsOf(l)
	phase.Store(2)
	back := time.Now()
	switch fault {
	case "SIGKILL":
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	case "SIGSTOP":
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	case "wrong-password":
		unlockServer(t, srv.Addr)
	}
	// Recovery: the next probe after the cooldown closes the breaker. Bounded wait, counted from
	// when the server is up again: on a loaded machine a restart or a CONFIG SET can itself take
	// seconds, which is not the limiter's to recover from. The bound is loose on purpose: after
	// the wrong password's outage the breaker's cooldown has doubled to 800ms (it doubles on each
	// probe refused so), the first probe after the return may be that far off, and on a starved
	// machine a probe can time out and reopen it for as long again; 10s leaves room for about
	// eleven of those and still fails a breaker that never closes. Unloaded, it recovers in
	// 0.70-0.72s; with the fuzzers running beside it, 0.06-4.5s was seen.
	upAfter := time.Since(back)
	recovered := time.Duration(-1)
	for deadline := time.Now().Add(recoveryBound); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if !statsOf(l).BreakerOpen {
			if _, err := l.Take(context.Background(), "probe", 1); err == nil {
				recovered = time.Since(back)
				break
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	_ = l.Close()
	_ = client.Close()
	if fb != nil {
		_ = fb.Close()
	}

	if recovered < 0 {
		t.Fatalf("no successful call within %v after the server came back (which took %v); stats %+v", recoveryBound, upAfter.Round(time.Millisecond), statsOf(l))
	}
	var outage []time.Duration
	var healthyErrs, outageCalls, outageErrs, lateErrs, honoured int
	for _, c := range calls {
		switch c.phase {
		case 0:
			// A call in flight when the fault hit may fail; one that ended before may not.
			if c.err != nil && c.end.Before(faultAt) {
				if healthyErrs == 0 {
					t.Logf("first error before the fault: %v (after %v)", c.err, c.latency)
				}
				healthyErrs++
			}
		case 1:
			outageCalls++
			outage = append(outage, c.latency)
			if c.latency > faultTimeout+faultSlack {
				t.Errorf("a call during the outage took %v, more than the %v deadline plus %v", c.latency, faultTimeout, faultSlack)
			}
			if c.err == nil {
				continue
			}
			outageErrs++
			if !errors.Is(c.err, ErrUnavailable) {
				t.Errorf("outage error %v does not wrap ErrUnavailable", c.err)
			}
			switch mode {
			case FailOpen:
				if !c.d.Allowed || c.d.Reason != engine.ReasonOK {
					t.Fatalf("fail-open decided %+v", c.d)
				}
			case FailClosed:
				if c.d.Allowed || c.d.Reason != engine.ReasonLimited || c.d.RetryAfter <= 0 {
					t.Fatalf("fail-closed decided %+v", c.d)
				}
			case FailFallback:
				if c.d.Limit != 5 {
					t.Fatalf("fallback decided %+v, not with the fallback limiter (limit 5)", c.d)
				}
			}
			honoured++
		case 2:
			if c.err != nil {
				lateErrs++
			}
		}
	}
	if healthyErrs > 0 {
		t.Errorf("%d errors before the fault", healthyErrs)
	}
	if outageErrs == 0 && fault != "restart" {
		t.Fatalf("no call failed during the outage (%d calls): the fault was not seen", outageCalls)
	}
	roundTrips := during.RoundTrips - before.RoundTrips
	failures := during.Failures - before.Failures
	short := during.ShortCircuits - before.ShortCircuits
	if fault != "restart" && (during.BreakerOpens == 0 || short == 0) {
		t.Fatalf("the breaker never opened: %+v", during)
	}
	// Without a breaker every outage call would be a failed round trip; with it only the first
	// wave and one probe per cooldown reach the server.
	if failures*4 > int64(outageCalls) {
		t.Errorf("%d of %d outage calls reached the dead server: the breaker is not keeping them off", failures, outageCalls)
	}
	srv.Stop()
	// Goroutines the test started are gone; what is left must be what was there before.
	goroutinesAfter := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); goroutinesAfter > goroutinesBefore && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		goroutinesAfter = runtime.NumGoroutine()
	}
	t.Logf("%s fail-%s: outage %v, %d calls from %d goroutines: p50 %v p99 %v max %v; %d of %d failed calls decided as fail-%s; "+
		"%d round trips (%d failed), %d short-circuited; recovered %v after the server returned; goroutines %d before, %d after",
		fault, mode, faultOutage, outageCalls, faultWorkers, percentile(outage, 0.5), percentile(outage, 0.99), slices.Max(outage),
		honoured, outageErrs, mode, roundTrips, failures, short, recovered.Round(time.Millisecond), goroutinesBefore, goroutinesAfter)
	if p99 := percentile(outage, 0.99); p99 > faultTimeout+faultSlack {
		t.Errorf("p99 during the outage %v, above the deadline %v plus %v", p99, faultTimeout, faultSlack)
	}
	if honoured != outageErrs {
		t.Errorf("%d of %d failed calls honoured fail-%s", honoured, outageErrs, mode)
	}
	if goroutinesAfter > goroutinesBefore {
		t.Errorf("%d goroutines after, %d before", goroutinesAfter, goroutinesBefore)
	}
	goleak.VerifyNone(t, leaks)
}

// lockServer sets a password and drops every connection, so that each reconnect without it gets
// NOAUTH: every key fails at once, as with a rotated password.
func lockServer(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "requirepass", "rotated").Err(); err != nil {
		t.Fatal(err)
	}
	// Kills this connection too; the error is expected.
	_ = c.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err()
}

func unlockServer(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Password: "rotated", DisableIdentity: true})
	defer c.Close()
	if err := c.ConfigSet(context.Background(), "requirepass", "").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestNoBlindRetry sends the script through a proxy that forwards it to the server but drops the
// connection instead of relaying the reply: the script ran, the client saw EOF. go-redis replays
// a command on EOF (MaxRetries defaults to 3), which would count the request again; the limiter
// marks its command not retryable, so the count stays 1.
func TestNoBlindRetry(t *testing.T) {
	proxy := startDropProxy(t, testAddr)
	client := redis.NewClient(&redis.Options{Addr: proxy, DisableIdentity: true, ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { _ = client.Close() })
	direct := newClient(t, testAddr)
	ctx := context.Background()
	// Loaded beforehand, so that the EVALSHA the proxy drops the reply of does run.
	if err := direct.ScriptLoad(ctx, fixedWindowLua).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := New(client, "retry", policy.FixedWindow{Limit: 100, Window: time.Hour}, WithClock(clock.NewManual(1_000)), WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take through a reply-dropping proxy: err = %v, want ErrUnavailable", err)
	}
	v, err := direct.Get(ctx, l.Key("k")).Result()
	if err != nil {
		t.Fatalf("the script did not run at all: %v", err)
	}
	if v != "0 1" {
		t.Fatalf("state after one dropped reply = %q, want %q (window 0, count 1): the script ran more than once", v, "0 1")
	}
}

// TestResetErrorsClassified pauses a real redis-server and checks that Reset's failures are
// classified as Take's are (the limiter's own timeout wraps ErrUnavailable and is not taken for
// the caller's deadline; the caller's own deadline or cancellation comes back as it is, breaker
// open or not), that a Reset never moves the breaker, that while the breaker is open Reset sends
// nothing (ErrCircuitOpen) and is never the probe that would close it, and that after Close it
// returns ErrClosed.
func TestResetErrorsClassified(t *testing.T) {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer client.Close()
	// A timeout long enough for the probe after the pause (a new connection, then NOSCRIPT and
	// EVAL) on a loaded machine; the test waits it out three times.
	const timeout, cooldown = 400 * time.Millisecond, 100 * time.Millisecond
	l, err := New(client, "reset-errors", policy.SlidingCounter{Limit: 5, Window: time.Minute},
		WithTimeout(timeout), WithBreaker(1, cooldown), WithOnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset with Redis up: %v", err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()

	short, cancel := context.WithTimeout(ctx, timeout/8)
	err = l.Reset(short, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reset under the caller's own short deadline = %v; want the caller's DeadlineExceeded, not ErrUnavailable", err)
	}
	var s Stats
	if l.Stats(&s); s.Failures != 0 {
		t.Fatalf("the caller's own deadline counted against Redis: %+v", s)
	}

	err = l.Reset(ctx, "k")
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Reset with Redis paused = %v; want ErrUnavailable from the limiter's timeout", err)
	}
	if l.Stats(&s); s.Failures != 1 || s.BreakerOpen {
		t.Fatalf("after a timed-out Reset: %+v; want one failure, and the breaker (threshold 1) still closed", s)
	}

	// A Take's timeout opens the breaker; Reset then sends nothing.
	if _, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take with Redis paused: %v", err)
	}
	var before Stats
	l.Stats(&before)
	if err := l.Reset(ctx, "k"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Reset with the breaker open = %v; want ErrCircuitOpen", err)
	}
	if l.Stats(&s); s.RoundTrips != before.RoundTrips || s.ShortCircuits != before.ShortCircuits+1 || !s.BreakerOpen {
		t.Fatalf("a Reset with the breaker open: %+v, before it %+v; want no round trip, one short circuit, the breaker open", s, before)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Reset(done, "k"); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reset with a cancelled ctx and the breaker open = %v; want the caller's Canceled", err)
	}

	// Redis back and the cooldown over: a Reset is still refused, since it is never the probe;
	// the next Take is, and closes the breaker; then Reset works.
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	time.Sleep(2 * cooldown)
	if err := l.Reset(ctx, "k"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Reset after the cooldown, before any probe = %v; want ErrCircuitOpen", err)
	}
	if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("the probing Take: %+v %v", d, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset once the probe closed the breaker: %v", err)
	}
	l.Close()
	if err := l.Reset(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reset after Close = %v; want ErrClosed", err)
	}
}

// TestResetWithoutDelLeavesTakesAlone: a Redis user that may run the scripts but not DEL gets an
// error from Reset that wraps ErrMisconfigured and names DEL, and the breaker stays closed, so
// every Take still goes to Redis: one command Take never sends says nothing of whether Take can
// run. The hook hears nothing of it (it is told of causes that stop the scripts).
func TestResetWithoutDelLeavesTakesAlone(t *testing.T) {
	ctx := context.Background()
	l, log := aclLimiter(t, "nodel", "-del")
	if err := l.Reset(ctx, "k"); !errors.Is(err, ErrMisconfigured) || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "DEL for Reset") {
		t.Fatalf("Reset without DEL = %v; want ErrMisconfigured wrapping the NOPERM reply and naming DEL", err)
	}
	if got := log.all(); len(got) != 0 {
		t.Fatalf("WithOnError's hook got %v; want nothing", got)
	}
	var s Stats
	if l.Stats(&s); s.BreakerOpen || s.BreakerOpens != 0 {
		t.Fatalf("a Reset without DEL moved the breaker: %+v", s)
	}
	if d, err := l.Take(ctx, "other", 1); err != nil || !d.Allowed {
		t.Fatalf("Take after the failed Reset: %+v %v; want it decided on Redis", d, err)
	}
}

// TestFailClosedRetryAfterFollowsTheBreaker: FailClosed's RetryAfter is the breaker's cooldown as
// it stands, doubled after a failed probe of a misconfigured server, and still doubled when a
// later probe times out and reopens the breaker for that long (docs/rls.md relies on this for
// duration_until_reset).
func TestFailClosedRetryAfterFollowsTheBreaker(t *testing.T) {
	srv := startServer(t)
	admin := newClient(t, srv.Addr)
	ctx := context.Background()
	const cooldown = 150 * time.Millisecond
	// A user that does not exist yet: every call gets WRONGPASS.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "late", Password: "pw", DisableIdentity: true,
		ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	// The timeout is long for a loopback call, so that a stalled machine under -race does not
	// turn a WRONGPASS into a timeout.
	l, err := New(c, "retry-breaker", policy.FixedWindow{Limit: 10, Window: time.Minute},
		WithTimeout(faultTimeout), WithBreaker(1, cooldown), WithOnFailure(FailClosed), WithOnError(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, err := l.Take(ctx, "k", 1)
	if !errors.Is(err, ErrMisconfigured) || d.Allowed || d.RetryAfter != cooldown {
		t.Fatalf("first Take: %+v %v; want a refusal for one cooldown, %v", d, err, cooldown)
	}
	time.Sleep(cooldown + 20*time.Millisecond)
	d, err = l.Take(ctx, "k", 1) // the probe, refused the same way: the cooldown doubles
	if !errors.Is(err, ErrMisconfigured) || d.RetryAfter != 2*cooldown {
		t.Fatalf("the failed probe: %+v %v; want a refusal for %v", d, err, 2*cooldown)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "late", "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	time.Sleep(2*cooldown + 20*time.Millisecond)
	d, err = l.Take(ctx, "k", 1) // the next probe times out, and reopens the breaker for 2 cooldowns
	reopened := time.Now()
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrMisconfigured) || d.RetryAfter != 2*cooldown {
		t.Fatalf("the timed-out probe: %+v %v; want a refusal for %v, the breaker's cooldown now", d, err, 2*cooldown)
	}
	d, _ = l.Take(ctx, "k", 1)
	// The rest of the doubled cooldown: at least what is left of it after the time since the
	// probe (with a millisecond of rounding), so more than one cooldown unless the machine stalled.
	if least := 2*cooldown - time.Since(reopened) - time.Millisecond; d.RetryAfter < least || d.RetryAfter > 2*cooldown {
		t.Fatalf("a call short-circuited after it: RetryAfter %v; want the rest of %v, at least %v", d.RetryAfter, 2*cooldown, least)
	}
}

// TestFailClosedRetryAfterForACallerThatGaveUp: a call whose caller gave up (its ctx done on
// entry, or its deadline passing during the probe) gets FailClosed's Decision as any other call
// does, RetryAfter included: the breaker's wait as it stands, not the configured cooldown. While
// the breaker is open that is the rest of its cooldown, doubled or not after failed probes; once
// the caller abandons the probe, the next call may try Redis at once. The same for a clock out of
// range, which the breaker does not judge either.
func TestFailClosedRetryAfterForACallerThatGaveUp(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	gaveUp, cancel := context.WithCancel(ctx)
	cancel()
	// A user that does not exist: every call gets WRONGPASS, which opens the breaker at once.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nobody", Password: "pw", DisableIdentity: true,
		ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	newLimiter := func(name string, cooldown time.Duration, opts ...Option) *Limiter {
		// A long timeout: every call dials and logs in afresh, and must be refused with WRONGPASS,
		// not cut short by a loaded machine.
		opts = append([]Option{WithTimeout(5 * time.Second), WithBreaker(1, cooldown), WithOnFailure(FailClosed), WithOnError(func(error) {})}, opts...)
		l, err := New(c, name, policy.FixedWindow{Limit: 10, Window: time.Minute}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}

	t.Run("open", func(t *testing.T) {
		// Long enough that the breaker stays open through a stalled machine's pauses.
		const cooldown = 2 * time.Second
		clk := clock.NewManual(time.Now().UnixMilli())
		l := newLimiter("gave-up-open", cooldown, WithClock(clk))
		m, err := All(l)
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if _, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrMisconfigured) {
			t.Fatalf("the opening call: %v", err)
		}
		opened := time.Now()
		time.Sleep(100 * time.Millisecond)
		check := func(what string, take func() (engine.Decision, error), want error) {
			t.Helper()
			start := time.Now()
			d, err := take()
			end := time.Now()
			// The rest of the cooldown: the breaker opened between before and opened.
			most, least := cooldown-start.Sub(opened), cooldown-end.Sub(before)
			if !errors.Is(err, want) || d.Allowed || d.Reason != engine.ReasonLimited || d.RetryAfter > most || d.RetryAfter < least {
				t.Fatalf("%s: %+v %v; want %v with RetryAfter the rest of the %v cooldown, in [%v, %v]", what, d, err, want, cooldown, least, most)
			}
		}
		check("Take, ctx done", func() (engine.Decision, error) { return l.Take(gaveUp, "k", 1) }, context.Canceled)
		check("TakeWithLimit, ctx done", func() (engine.Decision, error) { return l.TakeWithLimit(gaveUp, "k", 1, 5) }, context.Canceled)
		check("All's Take, ctx done", func() (engine.Decision, error) { return m.Take(gaveUp, "k", 1) }, context.Canceled)
		clk.Set(MaxTimeMs + 1)
		check("Take, clock out of range", func() (engine.Decision, error) { return l.Take(ctx, "k", 1) }, ErrUnavailable)
		check("All's Take, clock out of range", func() (engine.Decision, error) { return m.Take(ctx, "k", 1) }, ErrUnavailable)
	})

	t.Run("doubled", func(t *testing.T) {
		const cooldown = 50 * time.Millisecond
		l := newLimiter("gave-up-doubled", cooldown)
		if _, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrMisconfigured) {
			t.Fatalf("the opening call: %v", err)
		}
		// Two probes refused the same way: the cooldown doubles twice.
		var reopened time.Time
		for cool := cooldown; cool <= 2*cooldown; cool *= 2 {
			time.Sleep(cool + 10*time.Millisecond)
			if d, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrMisconfigured) || d.RetryAfter != 2*cool {
				t.Fatalf("a probe after %v: %+v %v; want the cooldown doubled to %v", cool, d, err, 2*cool)
			}
			reopened = time.Now()
		}
		d, err := l.Take(gaveUp, "k", 1)
		if least := 4*cooldown - time.Since(reopened) - time.Millisecond; !errors.Is(err, context.Canceled) || d.RetryAfter < least || d.RetryAfter > 4*cooldown {
			t.Fatalf("ctx done, after the breaker reopened for %v: %+v %v; want RetryAfter the rest of it, at least %v", 4*cooldown, d, err, least)
		}
	})

	t.Run("probe abandoned", func(t *testing.T) {
		const cooldown = 100 * time.Millisecond
		l := newLimiter("gave-up-probe", cooldown)
		if _, err := l.Take(ctx, "k", 1); !errors.Is(err, ErrMisconfigured) {
			t.Fatalf("the opening call: %v", err)
		}
		time.Sleep(cooldown + 10*time.Millisecond)
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Resume() }()
		// The probe, which the paused server keeps until the caller's deadline: abandoned, it
		// leaves the probe due, and the next call tries Redis.
		short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		d, err := l.Take(short, "k", 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) || d.RetryAfter != time.Millisecond {
			t.Fatalf("the probe, past its caller's deadline: %+v %v; want RetryAfter 1ms (a probe is due)", d, err)
		}
		if st := statsOf(l); st.RoundTrips != 2 {
			t.Fatalf("round trips %d, want 2: the opening call and the abandoned probe", st.RoundTrips)
		}
	})
}

// TestMisconfOpensBreaker: a server whose last background save failed refuses every write with
// MISCONF. That is a server that decides nothing, not a refusal of one key: the failures count,
// the breaker opens, and calls stop going to the server.
func TestMisconfOpensBreaker(t *testing.T) {
	// A save into a directory removed after the server started in it fails.
	dir := t.TempDir() + "/gone"
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err := redistest.Start("--dir", dir, "--save", "3600 1") // MISCONF needs a save point
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(srv.Stop)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, srv.Addr)
	ctx := context.Background()
	if err := admin.Set(ctx, "x", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := admin.Set(ctx, "x", "2", 0).Err(); err != nil && strings.HasPrefix(err.Error(), "MISCONF") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed save did not make the server refuse writes with MISCONF")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var log errLog
	l, err := New(admin, "misconf", policy.FixedWindow{Limit: 5, Window: time.Minute}, WithOnError(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const calls = 100
	admitted := 0
	for i := range calls {
		d, err := l.Take(ctx, fmt.Sprint("k", i), 1)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d on a MISCONF server: %+v, %v; want ErrUnavailable", i, d, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	st := statsOf(l)
	if !st.BreakerOpen || st.BreakerOpens != 1 || st.RoundTrips > DefaultBreakerMinCalls {
		t.Fatalf("%d calls on a MISCONF server: breaker open %v (opens %d), %d round trips; want it open after %d",
			calls, st.BreakerOpen, st.BreakerOpens, st.RoundTrips, DefaultBreakerMinCalls)
	}
	t.Logf("%d calls: %d round trips, %d reported, %d admitted by FailOpen", calls, st.RoundTrips, len(log.all()), admitted)
}

// Stats(nil) leaves nothing to fill, as the engine's does; it panicked.
func TestStatsNilIsLeftAlone(t *testing.T) {
	l := mustNew(t, "statsnil", policy.SlidingCounter{Limit: 10, Window: time.Minute})
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("Stats(nil) panicked: %v", r)
		}
	}()
	l.Stats(nil)
	if _, err := l.Take(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	var s Stats
	if l.Stats(&s); s.Calls != 1 {
		t.Errorf("Stats(&s) after Stats(nil): Calls %d, want 1", s.Calls)
	}
}
