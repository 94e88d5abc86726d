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
// the fixed window (compared with the engine) and the sliding log (a redisstore extension).
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
// ReasonClosed.Err() names, whatever its arguments.
func TestErrClosedIsTheRoot(t *testing.T) {
	l := mustNew(t, "closed", policy.FixedWindow{Limit: 4, Window: time.Second})
	_ = l.Close()
	ctx := context.Background()
	for _, call := range []func() (engine.Decision, error){
		func() (engine.Decision, error) { return l.Take(ctx, "k", 1) },
		func() (engine.Decision, error) { return l.TakeWithLimit(ctx, "k", 1, 2) },
		func() (engine.Decision, error) { return l.TakeWithLimit(ctx, "k", 1, 0) },
	} {
		d, err := call()
		if !errors.Is(err, slidelimit.ErrClosed) || !errors.Is(err, ErrClosed) || d.Reason != slidelimit.ReasonClosed || d.Reason.Err() != err {
			t.Fatalf("after Close: %+v %v, want ReasonClosed with slidelimit.ErrClosed", d, err)
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

	fb, err := engine.New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	local, err := New(deadClient(t), "local", p, WithFallback(fb))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for range 2 {
		_, err := local.Take(cancelled, "k", 1)
		isCallers("FailLocal", err)
	}
	if d := fb.Peek("k"); !d.Allowed {
		t.Fatalf("cancelled calls counted in the fallback: Peek = %+v", d)
	}
}

// TestFailureRefusesCostAboveLimit: when Redis does not decide, FailOpen and FailClosed refuse a
// cost above the limit as Redis (and GCRA, before any lookup) would, with the error.
func TestFailureRefusesCostAboveLimit(t *testing.T) {
	c := deadClient(t)
	for _, mode := range []OnFailure{FailOpen, FailClosed} {
		for _, p := range []policy.Policy{policy.SlidingCounter{Limit: 5, Window: time.Second}, policy.TokenBucket{Rate: 5, Burst: 5}} {
			l, err := New(c, "down", p, WithOnFailure(mode))
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Take(context.Background(), "k", 6)
			if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason != slidelimit.ReasonCostAboveLimit || d.Limit != 5 {
				t.Fatalf("%v, %s: Take(6) = %+v %v, want ReasonCostAboveLimit with ErrUnavailable", mode, p.ID(), d, err)
			}
			if d, _ := l.Take(context.Background(), "k", 5); d.Allowed != (mode == FailOpen) {
				t.Fatalf("%v, %s: Take(5) = %+v", mode, p.ID(), d)
			}
			_ = l.Close()
		}
	}
}
