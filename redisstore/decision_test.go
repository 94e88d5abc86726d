package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// TestLoweredLimitQuery: under a per-call limit lowered below the key's count, a query (n = 0)
// is refused until the window ends, as the engine refuses it, and no Remaining is negative, for
// the fixed window (compared with the engine) and the sliding log (a redisstore extension); the
// sliding counter admits it, as the engine does.
func TestLoweredLimitQuery(t *testing.T) {
	ctx := context.Background()
	const start = 1_700_000_000_000
	for _, p := range []policy.FixedWindow{{Limit: 4, Window: time.Second}, {Limit: policy.MaxLimit, Window: policy.MaxWindow}} {
		clk := clock.NewManual(start)
		eng, err := engine.New(p, engine.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		l := mustNew(t, "lowered", p, WithClock(clk))
		take := p.Limit - 1
		if want, got := eng.Take("k", take), must(l.Take(ctx, "k", take)); !sameDecision(got, want) {
			t.Fatalf("%+v Take(%d):\n redis  %+v\n engine %+v", p, take, got, want)
		}
		for _, n := range []int64{0, 1} {
			want := eng.TakeWithLimit("k", n, 2)
			got := must(l.TakeWithLimit(ctx, "k", n, 2))
			if !sameDecision(got, want) || got.Remaining < 0 {
				t.Fatalf("%+v TakeWithLimit(%d, limit 2) after %d:\n redis  %+v\n engine %+v", p, n, take, got, want)
			}
		}
	}
	// The sliding counter admits a query always, under a lowered limit too, as the engine does.
	sc := policy.SlidingCounter{Limit: 4, Window: time.Second}
	clk := clock.NewManual(start)
	eng, err := engine.New(sc, engine.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	lc := mustNew(t, "loweredsc", sc, WithClock(clk))
	eng.Take("k", 3)
	must(lc.Take(ctx, "k", 3))
	want, got := eng.TakeWithLimit("k", 0, 2), must(lc.TakeWithLimit(ctx, "k", 0, 2))
	if !got.Allowed || !sameDecision(got, want) || got.Remaining != 0 {
		t.Fatalf("sliding counter TakeWithLimit(0, limit 2) after 3:\n redis  %+v\n engine %+v\nwant admitted with Remaining 0", got, want)
	}
	l := mustNew(t, "loweredlog", policy.SlidingLog{Limit: 4, Window: time.Second}, WithClock(clock.NewManual(start)))
	must(l.Take(ctx, "k", 3))
	for _, n := range []int64{0, 1} {
		if d := must(l.TakeWithLimit(ctx, "k", n, 2)); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Second {
			t.Fatalf("sliding log TakeWithLimit(%d, limit 2) after 3: %+v, want refused with Remaining 0, RetryAfter 1s", n, d)
		}
	}
}

func must(d engine.Decision, err error) engine.Decision {
	if err != nil {
		panic(err)
	}
	return d
}

// TestErrClosedIsTheRoot: after Close every call returns the root package's ErrClosed, the one
// ReasonClosed.Err() names, whatever its arguments, with the limit the call gave (the policy's
// for none, or for an invalid one).
func TestErrClosedIsTheRoot(t *testing.T) {
	l := mustNew(t, "closed", policy.FixedWindow{Limit: 4, Window: time.Second})
	_ = l.Close()
	ctx := context.Background()
	for i, tc := range []struct {
		call  func() (engine.Decision, error)
		limit int64 // the per-key limit the call gave, or the policy's for none or an invalid one
	}{
		{func() (engine.Decision, error) { return l.Take(ctx, "k", 1) }, 4},
		{func() (engine.Decision, error) { return l.TakeWithLimit(ctx, "k", 1, 2) }, 2},
		{func() (engine.Decision, error) { return l.TakeWithLimit(ctx, "k", -1, 3) }, 3},
		{func() (engine.Decision, error) { return l.TakeWithLimit(ctx, "k", 1, 0) }, 4},
	} {
		d, err := tc.call()
		if !errors.Is(err, slidelimit.ErrClosed) || !errors.Is(err, ErrClosed) || d.Reason != slidelimit.ReasonClosed || d.Reason.Err() != err {
			t.Fatalf("call %d after Close: %+v %v, want ReasonClosed with slidelimit.ErrClosed", i, d, err)
		}
		if d.Limit != tc.limit {
			t.Fatalf("call %d after Close: Limit %d, want %d", i, d.Limit, tc.limit)
		}
	}
}

// TestTakeWithLimitEarlyRefusalsReportTheLimit: a refusal made before the policy runs (a
// negative cost) reports the per-key limit the call gave, as the engine's does; an invalid limit
// reports the policy's.
func TestTakeWithLimitEarlyRefusalsReportTheLimit(t *testing.T) {
	ctx := context.Background()
	p := policy.FixedWindow{Limit: 10, Window: time.Second}
	eng, err := engine.New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	l := mustNew(t, "early", p)
	for _, tc := range []struct {
		n, limit, want int64
		reason         slidelimit.Reason
	}{
		{-1, 3, 3, slidelimit.ReasonNegativeCost},
		{1, 0, 10, slidelimit.ReasonInvalidLimit},
		{1, policy.MaxLimit + 1, 10, slidelimit.ReasonInvalidLimit},
	} {
		d := must(l.TakeWithLimit(ctx, "k", tc.n, tc.limit))
		e := eng.TakeWithLimit("k", tc.n, tc.limit)
		if d.Allowed || d.Reason != tc.reason || d.Limit != tc.want || e.Limit != tc.want {
			t.Fatalf("TakeWithLimit(%d, limit %d) = %+v (engine %+v), want %v with Limit %d", tc.n, tc.limit, d, e, tc.reason, tc.want)
		}
	}
}

// TestNewRejectsNils: a typed nil client and a nil Option are errors, not panics.
func TestNewRejectsNils(t *testing.T) {
	p := policy.SlidingCounter{Limit: 1, Window: time.Second}
	if _, err := New((*redis.Client)(nil), "a", p); err == nil {
		t.Fatal("New((*redis.Client)(nil)) succeeded")
	}
	if _, err := New((*redis.ClusterClient)(nil), "a", p); err == nil {
		t.Fatal("New((*redis.ClusterClient)(nil)) succeeded")
	}
	if _, err := New(newClient(t, testAddr), "a", p, nil); err == nil {
		t.Fatal("New with a nil Option succeeded")
	}
}

// deadClient returns a client for a server that was started and killed: every call fails at
// once with a refused connection.
func deadClient(t *testing.T) *redis.Client {
	srv := startServer(t)
	srv.Kill()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestDoneCtxComesFirst: a ctx done on entry is returned as ctx's error even where the breaker
// is open or the deny cache knows the key, and under FailLocal it counts nothing in the fallback.
func TestDoneCtxComesFirst(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	isCallers := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: err = %v, want context.Canceled and not ErrUnavailable", what, err)
		}
	}
	p := policy.SlidingCounter{Limit: 1, Window: time.Minute}

	open, err := New(deadClient(t), "open", p, WithBreaker(1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Take(ctx, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dead server: err = %v", err)
	}
	if !statsOf(open).BreakerOpen {
		t.Fatal("the breaker did not open")
	}
	_, err = open.Take(cancelled, "k", 1)
	isCallers("breaker open", err)

	cached := mustNew(t, "cached", p)
	must(cached.Take(ctx, "k", 1))
	if d := must(cached.Take(ctx, "k", 1)); d.Allowed {
		t.Fatalf("second unit admitted: %+v", d)
	}
	_, err = cached.Take(cancelled, "k", 1)
	isCallers("deny cache hit", err)

	local, fb := onDeadRedisWithFallback(t, "local", p)
	// Cost 1 is what the fallback's Peek would admit: it may not be admitted, since nothing is
	// counted for it.
	for range 2 {
		d, err := local.Take(cancelled, "k", 1)
		isCallers("FailLocal", err)
		if d.Allowed || d.Reason != slidelimit.ReasonLimited || d.Counted != 0 || d.Limit != 1 || d.Remaining != 1 {
			t.Fatalf("FailLocal, ctx done, Take(1) = %+v, want a refusal (ReasonLimited, Limit 1, Remaining 1 from the fallback's Peek)", d)
		}
	}
	// Cost 5 can never pass: it says so, as in the other modes, rather than call it a wait.
	d, err := local.Take(cancelled, "k", 5)
	isCallers("FailLocal", err)
	if d.Allowed || d.Reason != slidelimit.ReasonCostAboveLimit || d.Counted != 0 || d.Limit != 1 {
		t.Fatalf("FailLocal, ctx done, Take(5) = %+v, want ReasonCostAboveLimit with Limit 1", d)
	}
	if d := fb.Take("k", 1); !d.Allowed {
		t.Fatalf("cancelled calls counted in the fallback: its first unit is refused: %+v", d)
	}
}

// TestDoneCtxDoesNotChangeWhatNoStateCould: a request that no Redis state could change is
// decided as always, with no error, whatever the caller's ctx says: a negative cost, and a GCRA
// cost above its burst.
func TestDoneCtxDoesNotChangeWhatNoStateCould(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	l, err := New(deadClient(t), "gcra", policy.GCRA{Rate: 5, Burst: 3}, WithOnFailure(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d, err := l.Take(cancelled, "k", -1); err != nil || d.Allowed || d.Reason != slidelimit.ReasonNegativeCost || d.Limit != 3 {
		t.Fatalf("Take(-1) = %+v %v, want ReasonNegativeCost with Limit 3 and no error", d, err)
	}
	if d, err := l.Take(cancelled, "k", 4); err != nil || d.Allowed || d.Reason != slidelimit.ReasonCostAboveLimit || d.Limit != 3 {
		t.Fatalf("Take(4) = %+v %v, want ReasonCostAboveLimit with Limit 3 and no error", d, err)
	}
	// A cost the burst can hold depends on the key's state: the caller's error.
	if _, err := l.Take(cancelled, "k", 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take(3): err = %v, want context.Canceled", err)
	}
}

// TestFailureRefusesCostAboveLimit: when Redis does not decide, every failure mode refuses a cost
// above the limit as Redis (and GCRA, before any lookup) would, with the error; FailLocal's
// fallback is not asked.
func TestFailureRefusesCostAboveLimit(t *testing.T) {
	c := deadClient(t)
	for _, mode := range []OnFailure{FailOpen, FailClosed, FailLocal} {
		for _, p := range []policy.Policy{policy.SlidingCounter{Limit: 5, Window: time.Second}, policy.TokenBucket{Rate: 5, Burst: 5}} {
			opts := []Option{WithOnFailure(mode)}
			if mode == FailLocal {
				fb, err := engine.New(p)
				if err != nil {
					t.Fatal(err)
				}
				defer fb.Close()
				opts = []Option{WithFallback(fb)}
			}
			l, err := New(c, "down", p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Take(context.Background(), "k", 6)
			if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason != slidelimit.ReasonCostAboveLimit || d.Limit != 5 {
				t.Fatalf("%v, %s: Take(6) = %+v %v, want ReasonCostAboveLimit with ErrUnavailable", mode, p.ID(), d, err)
			}
			if d, _ := l.Take(context.Background(), "k", 5); d.Allowed != (mode != FailClosed) {
				t.Fatalf("%v, %s: Take(5) = %+v", mode, p.ID(), d)
			}
			_ = l.Close()
		}
	}
}

// TestDoneCtxRemainingWithinTheCallsLimit: the refusal a done ctx gets under FailLocal reports
// the fallback's Remaining, but never more than the limit the call gave.
func TestDoneCtxRemainingWithinTheCallsLimit(t *testing.T) {
	p := policy.FixedWindow{Limit: 10, Window: time.Minute}
	l, _ := onDeadRedisWithFallback(t, "clamp", p)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := l.TakeWithLimit(cancelled, "k", 1, 3)
	if !errors.Is(err, context.Canceled) || d.Allowed || d.Limit != 3 || d.Remaining != 3 {
		t.Fatalf("TakeWithLimit(cancelled, 1, 3) = %+v, %v; want a refusal with Limit 3 and Remaining 3 (the fallback's 10, capped)", d, err)
	}
}

// onDeadRedisWithFallback returns a limiter named name for p whose Redis never answers, with an
// engine for p as its FailLocal fallback, both closed at the test's end.
func onDeadRedisWithFallback(t *testing.T, name string, p policy.Policy) (*Limiter, *engine.Limiter) {
	t.Helper()
	fb, err := engine.New(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	l, err := New(deadClient(t), name, p, WithFallback(fb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, fb
}

// TestFallbackAdmissionRefundsNothingOnRedis: an admission FailLocal's fallback made was counted
// in the fallback, not on Redis. It reports Counted 0, so Refund gives nothing back on Redis
// (where it would free units other requests counted) and makes no round trip for it.
func TestFallbackAdmissionRefundsNothingOnRedis(t *testing.T) {
	l, fb := onDeadRedisWithFallback(t, "fbrefund", policy.SlidingCounter{Limit: 10, Window: time.Minute})
	d, err := l.Take(context.Background(), "k", 3)
	if !errors.Is(err, ErrUnavailable) || !d.Allowed || d.Counted != 0 {
		t.Fatalf("Take(3) on a dead Redis = %+v, %v; want the fallback's admission with Counted 0", d, err)
	}
	if got := fb.Peek("k").Remaining; got != 7 {
		t.Fatalf("the fallback holds %d of 10 left, want 7: it counted the admission", got)
	}
	if n, err := l.Refund(context.Background(), "k", 3, d); n != 0 || err != nil {
		t.Fatalf("Refund of the fallback's admission = %d, %v; want 0 and no round trip (no error)", n, err)
	}
}

// TestDoneCtxBeforeTheClocksRange: a done ctx is the caller's error even when the clock is out of
// the scripts' range, and counts nothing in the fallback; the range error itself is a failure to
// decide through Redis, wrapping ErrUnavailable.
func TestDoneCtxBeforeTheClocksRange(t *testing.T) {
	p := policy.SlidingCounter{Limit: 10, Window: time.Minute}
	clk := clock.NewManual(MaxTimeMs + 1000)
	fb, err := engine.New(p, engine.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	c := deadClient(t)
	local, err := New(c, "range", p, WithClock(clk), WithFallback(fb))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	open, err := New(c, "range-open", p, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, l := range []*Limiter{local, open} {
		m, err := All(l)
		if err != nil {
			t.Fatal(err)
		}
		for name, take := range map[string]func(context.Context) (engine.Decision, error){
			"Take": func(ctx context.Context) (engine.Decision, error) { return l.Take(ctx, "k", 3) },
			"All":  func(ctx context.Context) (engine.Decision, error) { return m.Take(ctx, "k", 3) },
		} {
			// The failure choice's Decision (FailOpen's admission, FailLocal's refusal), counted
			// nowhere, with the caller's own error.
			if d, err := take(cancelled); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) || d.Allowed != (l == open) || d.Counted != 0 {
				t.Fatalf("%s %s, done ctx, clock out of range = %+v, %v; want the failure choice with context.Canceled", l.Name(), name, d, err)
			}
			if got := fb.Peek("k").Remaining; got != 10 {
				t.Fatalf("%s %s: the fallback counted a request whose caller had given up: %d of 10 left", l.Name(), name, got)
			}
			if l == open {
				if _, err := take(context.Background()); !errors.Is(err, ErrUnavailable) {
					t.Fatalf("%s %s: clock out of range: err = %v, want ErrUnavailable", l.Name(), name, err)
				}
			}
		}
	}
}

// TestNilCtxIsBackground: a nil ctx is a caller's slip that neither panics nor fails the call.
func TestNilCtxIsBackground(t *testing.T) {
	l := mustNew(t, "nilctx", policy.SlidingCounter{Limit: 10, Window: time.Minute})
	m, err := All(l)
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	d, err := l.Take(nilCtx, "k", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("Take(nil ctx) = %+v, %v", d, err)
	}
	if d, err := m.Take(nilCtx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("All.Take(nil ctx) = %+v, %v", d, err)
	}
	if n, err := l.Refund(nilCtx, "k", 1, d); err != nil || n != 1 {
		t.Fatalf("Refund(nil ctx) = %d, %v; want 1", n, err)
	}
	if err := l.Reset(nilCtx, "k"); err != nil {
		t.Fatalf("Reset(nil ctx) = %v", err)
	}
}
