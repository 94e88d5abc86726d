package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// TestSkewedHostUnderClientTime: under client time a host an hour ahead writes a window an hour
// in the future, and Redis refuses the other hosts for it while the key lives. Their deny caches
// must not outlive the key: once Redis has dropped it, the next request goes to Redis and is
// admitted, as Redis admits it.
func TestSkewedHostUnderClientTime(t *testing.T) {
	ctx := context.Background()
	p := policy.SlidingCounter{Limit: 1, Window: 100 * time.Millisecond}
	now := time.Now().UnixMilli()
	ahead := clock.NewManual(now + time.Hour.Milliseconds())
	here := clock.NewManual(now)
	a := mustNew(t, "skew", p, WithClock(ahead), WithClockSkew(0))
	b := mustNew(t, "skew", p, WithClock(here), WithClockSkew(0))
	if d, err := a.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("host ahead: %+v, %v", d, err)
	}
	d, err := b.Take(ctx, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter < 59*time.Minute {
		t.Fatalf("host behind, key written an hour ahead: %+v, %v (want refused for about an hour)", d, err)
	}
	// The key's TTL is two windows: 200ms of the server's time. A loaded machine may take longer
	// to see it go: wait for that, with the host's clock kept on the real one.
	start := time.Now()
	time.Sleep(300 * time.Millisecond)
	for {
		if n, _ := newClient(t, testAddr).Exists(ctx, b.Key("k")).Result(); n == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the key outlived its 200ms TTL by 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	here.Advance(time.Since(start))
	d, err = b.Take(ctx, "k", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("after Redis dropped the key, host behind: %+v, %v; stats %+v (the deny cache outlived the key)", d, err, statsOf(b))
	}
}

// TestSkewedHostUnderServerTime: by default decisions use the server's clock, so a host whose
// own clock is an hour ahead decides exactly as the others do, and its deny cache, reckoning on
// its own clock plus the offset it learned, refuses no longer than Redis does.
func TestSkewedHostUnderServerTime(t *testing.T) {
	ctx := context.Background()
	p := policy.FixedWindow{Limit: 2, Window: 200 * time.Millisecond}
	now := time.Now().UnixMilli()
	ahead := clock.NewManual(now + time.Hour.Milliseconds())
	a := mustNew(t, "srvskew", p, WithClock(ahead), WithServerTime())
	b := mustNew(t, "srvskew", p) // the default: server time, the coarse clock
	// A window edge may fall between the calls, so that none is refused: then again, on a fresh
	// key, a few times, before the test gives up.
	var d1 time.Duration
	key := ""
	for attempt := 0; d1 == 0; attempt++ {
		if attempt == 5 {
			t.Fatal("no refusal in 5 attempts: every one straddled a window edge")
		}
		key = "k" + string(rune('0'+attempt))
		for _, l := range []*Limiter{a, b} {
			if d, err := l.Take(ctx, key, 1); err != nil || !d.Allowed {
				// A window edge between the two is possible; the bound below still holds.
				t.Logf("take: %+v, %v", d, err)
			}
		}
		for i := range 3 {
			d, err := a.Take(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed && d.RetryAfter > p.Window {
				t.Fatalf("try %d: host ahead refused for %v, longer than the window %v: it decided on its own clock", i, d.RetryAfter, p.Window)
			}
			if !d.Allowed {
				d1 = d.RetryAfter
			}
		}
	}
	// Past the window on the real clock (the manual one moves with it), Redis admits again and
	// so must the deny cache let the request through.
	time.Sleep(d1 + 20*time.Millisecond)
	ahead.Advance(d1 + 20*time.Millisecond)
	if d, err := a.Take(ctx, key, 1); err != nil || !d.Allowed {
		t.Fatalf("after the retry time, host ahead: %+v, %v; stats %+v", d, err, statsOf(a))
	}
}

// TestDenyCacheReadsAFreshClock: the deny cache reckons its entries on a fresh reading of the
// clock, not on whatever the coarse clock's goroutine last wrote: that goroutine can lag by tens
// of milliseconds on a busy machine, and the cache then went on refusing past the retry time that
// Redis gave. A zero Clock has no goroutine at all: only a Refresh moves it, so the cache must
// refresh it to see the retry time pass.
func TestDenyCacheReadsAFreshClock(t *testing.T) {
	ctx := context.Background()
	p := policy.FixedWindow{Limit: 1, Window: 200 * time.Millisecond}
	l := mustNew(t, "fresh-clock", p, WithClock(new(clock.Clock)), WithServerTime())
	var d engine.Decision
	var err error
	for {
		if d, err = l.Take(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break // refused: the deny cache holds the key until the window ends
		}
	}
	time.Sleep(d.RetryAfter + 5*time.Millisecond)
	if d, err = l.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("past the retry time: %+v, %v (want admitted, as Redis admits it)", d, err)
	}
}

// TestManualClockStillMeetsRealExpiry: under a manual clock that stands still, a key's state is
// gone once Redis's own clock passes its expiry (the window twice, for the sliding counter, plus
// the skew), as WithClock's doc warns: the same simulated instant then finds a new key.
func TestManualClockStillMeetsRealExpiry(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(1_760_000_000_000)
	l := mustNew(t, "still", policy.SlidingCounter{Limit: 1, Window: 50 * time.Millisecond}, WithClock(clk), WithClockSkew(0), WithDenyCache(0))
	if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first: %+v, %v", d, err)
	}
	if d, err := l.Take(ctx, "k", 1); err != nil || d.Allowed {
		t.Fatalf("second, same instant: %+v, %v (want refused)", d, err)
	}
	time.Sleep(250 * time.Millisecond) // past the key's TTL of two windows on Redis's clock
	if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("same instant after the TTL: %+v, %v (want admitted: the key expired)", d, err)
	}
}
