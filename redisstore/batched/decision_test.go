package batched

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
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// TestStartDuringOutage: processes that start while Redis is down have never heard the fleet's
// size, so they decide alone with WithInitialFleetSize's, and the fleet stays within the limit:
// three of them, told the fleet may be five, admit at most floor(L/5) each. A cost above the
// share but within the limit is refused as waiting, not as a cost no window can hold, with the
// policy's Limit; a cancelled ctx counts nothing, even alone. When Redis returns, the first
// heartbeat keeps the larger size (five: the membership holds only those that have had one so
// far), and from the next one the live count (three) takes over.
func TestStartDuringOutage(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	srv.Kill()
	const procs, assumed = 3, 5
	p := policy.SlidingCounter{Limit: 30, Window: time.Minute}
	clk := clock.NewManual(t0)
	ls := make([]*Limiter, procs)
	for i := range ls {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		ls[i] = newLimiter(t, c, clk, p, WithInitialFleetSize(assumed), WithTimeout(time.Second))
		var s Stats
		if ls[i].Stats(&s); !s.Offline || s.Fleet != assumed {
			t.Fatalf("process %d: stats %+v, want offline with the assumed fleet of %d", i, s, assumed)
		}
	}
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if d, err := ls[0].Take(cancelled, "k", 1); !errors.Is(err, context.Canceled) || errors.Is(err, ErrOffline) || d.Allowed {
		t.Fatalf("cancelled ctx while offline: %+v %v, want a refusal with context.Canceled", d, err)
	}
	d, err := ls[0].Take(ctx, "k", 15)
	if !errors.Is(err, ErrOffline) || d.Allowed || d.Reason != slidelimit.ReasonLimited || d.Limit != p.Limit || d.RetryAfter != DefaultSyncInterval {
		t.Fatalf("cost 15 above the share %d while offline: %+v %v, want ReasonLimited, Limit %d, RetryAfter %v", p.Limit/assumed, d, err, p.Limit, DefaultSyncInterval)
	}
	var total int64
	for i, l := range ls {
		for {
			d, err := l.Take(ctx, "k", 1)
			if !errors.Is(err, ErrOffline) {
				t.Fatalf("process %d: err = %v, want ErrOffline", i, err)
			}
			if !d.Allowed {
				break
			}
			total++
		}
	}
	if total > p.Limit {
		t.Fatalf("the fleet admitted %d units offline on one key, limit %d", total, p.Limit)
	}
	if total != procs*(p.Limit/assumed) {
		t.Fatalf("the fleet admitted %d units offline, want each process's share, %d in all", total, procs*(p.Limit/assumed))
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Round 0 is each process's first answered heartbeat: the membership has 1, then 2, then 3
	// members, so each keeps the assumed 5. Round 1, a sync interval later (well within the
	// membership's liveness, so all three stay members), gives the live count.
	for round, want := range []int64{assumed, procs, procs} {
		for i, l := range ls {
			l.step()
			var s Stats
			if l.Stats(&s); s.Offline || s.Fleet != want {
				t.Fatalf("round %d, process %d: stats %+v, want online with a fleet of %d", round, i, s, want)
			}
		}
		clk.Advance(DefaultSyncInterval)
	}
}

// TestInitialFleetSizeYieldsToTheLiveCount: a heartbeat that answers at New replaces the
// assumed size with the live count.
func TestInitialFleetSizeYieldsToTheLiveCount(t *testing.T) {
	c := newClient(t, testAddr)
	flushAll(t, c)
	l := newLimiter(t, c, clock.NewManual(t0), policy.SlidingCounter{Limit: 30, Window: time.Second}, WithInitialFleetSize(5))
	var s Stats
	if l.Stats(&s); s.Offline || s.Fleet != 1 {
		t.Fatalf("stats %+v, want online with the live fleet of 1", s)
	}
	if _, err := New(c, "t", policy.SlidingCounter{Limit: 30, Window: time.Second}, WithInitialFleetSize(0)); err == nil {
		t.Fatal("WithInitialFleetSize(0) accepted")
	}
}

// TestCountedIsTheCost: every admitted Decision reports the units it counted, whether it was
// decided from local quota or after a lease.
func TestCountedIsTheCost(t *testing.T) {
	c := newClient(t, testAddr)
	flushAll(t, c)
	clk := clock.NewManual(t0)
	l := newLimiter(t, c, clk, policy.SlidingCounter{Limit: 1000, Window: time.Second})
	ctx := context.Background()
	var s Stats
	local := 0
	for i := range 300 {
		n := int64(1 + i%3)
		l.Stats(&s)
		before := s.Leases
		d, err := l.Take(ctx, "k", n)
		if err != nil || !d.Allowed {
			t.Fatalf("Take %d: %+v %v", i, d, err)
		}
		if d.Counted != n {
			t.Fatalf("Take %d of %d: Counted = %d", i, n, d.Counted)
		}
		if l.Stats(&s); s.Leases == before {
			local++
		}
		if i%10 == 9 {
			clk.Advance(time.Millisecond)
			l.step()
		}
	}
	if local == 0 {
		t.Fatal("no decision came from local quota: the test did not exercise the hot path")
	}
	if d, _ := l.Take(ctx, "k", 0); d.Counted != 0 {
		t.Fatalf("n=0: Counted = %d", d.Counted)
	}
}

// TestRememberedRefusalWaitsForItsCost: a refusal remembered for a small request must not hand
// its shorter wait to a larger one: each gets the engine's RetryAfter, and a retry at that time
// is admitted.
func TestRememberedRefusalWaitsForItsCost(t *testing.T) {
	l, ref, clk := againstEngine(t, policy.SlidingCounter{Limit: 10, Window: time.Second})
	take := takeBoth(t, l, ref, clk)
	take(10)
	clk.Advance(500 * time.Millisecond)
	take(1)
	var s Stats
	l.Stats(&s)
	before := s.RefusedLocally
	d := take(3)
	if l.Stats(&s); s.RefusedLocally != before+1 {
		t.Fatalf("Take(3) was not refused from the remembered refusal (RefusedLocally %d → %d)", before, s.RefusedLocally)
	}
	clk.Advance(d.RetryAfter)
	if d := take(3); !d.Allowed {
		t.Fatalf("retry at RetryAfter refused: %+v", d)
	}
}

// TestRememberedRefusalAfterALaterLease: a refusal is remembered with the counts Redis returned;
// a smaller request then takes a lease in the same window, and a larger one refused from memory
// must wait as long as those larger counts say, as the engine does, so that a retry then is
// admitted.
func TestRememberedRefusalAfterALaterLease(t *testing.T) {
	l, ref, clk := againstEngine(t, policy.SlidingCounter{Limit: 10, Window: time.Second})
	take := takeBoth(t, l, ref, clk)
	take(8)
	clk.Advance(10 * time.Millisecond)
	if d := take(5); d.Allowed {
		t.Fatalf("Take(5) after 8 of 10 admitted: %+v", d)
	}
	clk.Advance(10 * time.Millisecond)
	take(2) // a lease: Redis now counts 10
	clk.Advance(10 * time.Millisecond)
	d := take(5)
	clk.Advance(d.RetryAfter)
	if d := take(5); !d.Allowed {
		t.Fatalf("retry at RetryAfter refused: %+v", d)
	}
}

// TestNilCtxIsBackground: a nil ctx neither panics nor leaves the key locked (which would hang the
// key's later calls, the exchange that flushes it, and Close).
func TestNilCtxIsBackground(t *testing.T) {
	c := newClient(t, testAddr)
	flushAll(t, c)
	l := newLimiter(t, c, clock.NewManual(t0), policy.SlidingCounter{Limit: 100, Window: time.Second})
	var nilCtx context.Context
	for _, n := range []int64{1, 50} { // a lease, then a request past it
		if d, err := l.Take(nilCtx, "k", n); err != nil || !d.Allowed {
			t.Fatalf("Take(nil ctx, %d) = %+v, %v", n, d, err)
		}
	}
	if d, err := l.Take(context.Background(), "k", 1); err != nil || !d.Allowed {
		t.Fatalf("Take after nil-ctx calls = %+v, %v", d, err)
	}
}

// TestCostAboveLimitFields: a cost above the limit is refused with the key's window and
// remaining units, as the engine answers it.
func TestCostAboveLimitFields(t *testing.T) {
	p := policy.SlidingCounter{Limit: 5, Window: time.Second}
	l, ref, _ := againstEngine(t, p)
	ctx := context.Background()
	for _, n := range []int64{6, 1, 6} {
		want := ref.Take("k", n)
		got, err := l.Take(ctx, "k", n)
		if err != nil || got != want {
			t.Fatalf("Take(%d) = %+v %v, engine %+v", n, got, err, want)
		}
	}
}

// takeBoth returns a step that takes n units for key "k" from l and from the engine ref, and fails
// the test unless l decides as ref does (Allowed, RetryAfter, Counted).
func takeBoth(t *testing.T, l *Limiter, ref *engine.Limiter, clk *clock.Clock) func(n int64) slidelimit.Decision {
	return func(n int64) slidelimit.Decision {
		t.Helper()
		want := ref.Take("k", n)
		got, err := l.Take(context.Background(), "k", n)
		if err != nil || got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter || got.Counted != want.Counted {
			t.Fatalf("at +%dms Take(%d) = %+v %v, engine %+v", clk.Now()-t0, n, got, err, want)
		}
		return got
	}
}

// againstEngine returns a limiter for p on the flushed test server, and the engine deciding p on
// the same manual clock, for tests that compare the two decision by decision.
func againstEngine(t *testing.T, p policy.SlidingCounter) (*Limiter, *engine.Limiter, *clock.Clock) {
	t.Helper()
	c := newClient(t, testAddr)
	flushAll(t, c)
	clk := clock.NewManual(t0)
	ref, err := engine.New(p, engine.WithClock(clk), engine.WithEviction(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	return newLimiter(t, c, clk, p), ref, clk
}
