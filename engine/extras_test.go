package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

func TestTakeWithLimit(t *testing.T) {
	l, clk := newSC(t, 10, time.Second, WithMaxLimit(100))
	for i := range 100 {
		require.True(t, l.TakeWithLimit("premium", 1, 100).Allowed, "premium request %d", i)
	}
	d := l.TakeWithLimit("premium", 1, 100)
	require.False(t, d.Allowed)
	require.Equal(t, int64(100), d.Limit)
	for range 10 {
		require.True(t, l.Allow("basic"))
	}
	require.False(t, l.Allow("basic"), "the default limit is untouched")

	// A raised limit applies at once: 10 taken at the default, 5 more at 15.
	require.True(t, l.TakeWithLimit("basic", 5, 15).Allowed)
	require.False(t, l.TakeWithLimit("basic", 1, 15).Allowed)
	// A lowered one refuses until the counts decay under it: 15 carried from the previous window
	// weigh floor(15*(1000-e)/1000); below 5 only once e > 666 ms.
	clk.Set(start + 1000 + 666)
	require.False(t, l.TakeWithLimit("basic", 1, 5).Allowed)
	clk.Set(start + 1000 + 734)
	require.True(t, l.TakeWithLimit("basic", 1, 5).Allowed) // floor(15*266/1000) = 3; 3+1 <= 5

	for _, bad := range []int64{0, -1, 101} {
		d := l.TakeWithLimit("x", 1, bad)
		require.False(t, d.Allowed)
		require.Equal(t, ReasonInvalidLimit, d.Reason, "limit %d", bad)
	}
	require.Equal(t, 2, l.Len(), "a refused invalid limit creates no key")
	require.Zero(t, testing.AllocsPerRun(100, func() { l.TakeWithLimit("premium", 1, 100) }))
}

func TestWithMaxLimitSizesWideCells(t *testing.T) {
	l, _ := newSC(t, 10, time.Minute, WithMaxLimit(1<<30))
	require.True(t, l.TakeWithLimit("big", 1<<30, 1<<30).Allowed)
	require.False(t, l.TakeWithLimit("big", 1, 1<<30).Allowed)
	pr, _ := l.Inspect("big")
	require.Equal(t, int64(1<<30), pr.Estimate)
}

func TestRefund(t *testing.T) {
	l, clk := newSC(t, 5, time.Second)
	d := l.Take("k", 3)
	require.True(t, d.Allowed)
	require.Equal(t, int64(3), l.Refund("k", 3, d))
	require.True(t, l.AllowN("k", 5), "the refunded units are available again")

	// Counted in the previous window, the units still weigh on the estimate; refunded, they do not.
	clk.Set(start + 1000 + 500)
	pr, _ := l.Inspect("k")
	require.Equal(t, int64(2), pr.Estimate) // floor(5*500/1000)
	require.Equal(t, int64(5), l.Refund("k", 5, d2(d, start+1000)))
	pr, _ = l.Inspect("k")
	require.Equal(t, int64(0), pr.Estimate)

	// Two windows on they count no more, and nothing is given back.
	d = l.Take("k", 1)
	clk.Set(start + 3000)
	require.Equal(t, int64(0), l.Refund("k", 1, d))

	require.Equal(t, int64(0), l.Refund("k", 1, Decision{}), "a refused decision gives nothing back")
	require.Equal(t, int64(0), l.Refund("ghost", 1, d))
	_, tracked := l.Inspect("ghost")
	require.False(t, tracked, "a refund creates no key")
}

// d2 is an admitted decision for the window ending at resetAt.
func d2(d Decision, resetAt int64) Decision {
	d.ResetAt = time.UnixMilli(resetAt)
	return d
}

// TestRefundIsExact: a limiter that admitted and then refunded a request is, from then on,
// indistinguishable from one that never saw it.
func TestRefundIsExact(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.SampledFrom([]int64{1, 5, 100, 1 << 22}).Draw(rt, "limit")
		clk := clock.NewManual(start)
		mk := func() *Limiter {
			l, err := New(policy.SlidingCounter{Limit: limit, Window: time.Second}, WithClock(clk), WithEviction(false))
			require.NoError(rt, err)
			return l
		}
		a, b := mk(), mk()
		defer a.Close()
		defer b.Close()
		var pending []struct {
			d    Decision
			cost int64
		}
		for i := range rapid.IntRange(1, 60).Draw(rt, "ops") {
			clk.Advance(time.Duration(rapid.Int64Range(0, 700).Draw(rt, "tick")) * time.Millisecond)
			op := rapid.IntRange(0, 2).Draw(rt, "op")
			if op == 0 && len(pending) > 0 {
				op = 2 // the two differ until the refunds; compare only when they should agree
			}
			switch op {
			case 0: // a request both see
				cost := rapid.Int64Range(0, limit).Draw(rt, "cost")
				require.Equal(rt, b.Take("k", cost).Allowed, a.Take("k", cost).Allowed, "op %d", i)
			case 1: // a request only a sees, to be refunded
				cost := rapid.Int64Range(1, limit).Draw(rt, "xcost")
				if d := a.Take("k", cost); d.Allowed {
					pending = append(pending, struct {
						d    Decision
						cost int64
					}{d, cost})
				}
			case 2:
				for _, p := range pending {
					a.Refund("k", p.cost, p.d)
				}
				pending = pending[:0]
				pa, _ := a.Inspect("k")
				pb, _ := b.Inspect("k")
				require.Equal(rt, pb, pa, "op %d: after the refunds a and b must agree", i)
			}
		}
	})
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewCoarse(time.Millisecond) // inside the bubble: it ticks in fake time
		defer clk.Stop()
		l, err := New(policy.SlidingCounter{Limit: 2, Window: time.Second}, WithClock(clk))
		require.NoError(t, err)
		defer l.Close()
		ctx := context.Background()
		begin := time.Now()
		require.NoError(t, l.Wait(ctx, "k", 1))
		require.NoError(t, l.Wait(ctx, "k", 1))
		require.Equal(t, time.Duration(0), time.Since(begin))

		want := l.Peek("k").RetryAfter
		require.Positive(t, want)
		require.NoError(t, l.Wait(ctx, "k", 1))
		// It slept the solved wait (the coarse clock may add a tick), not a polling interval.
		require.GreaterOrEqual(t, time.Since(begin), want)
		require.LessOrEqual(t, time.Since(begin), want+2*time.Millisecond)

		// Giving up consumes nothing.
		before, _ := l.Inspect("k")
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		require.ErrorIs(t, l.Wait(cctx, "k", 2), context.Canceled)
		after, _ := l.Inspect("k")
		require.LessOrEqual(t, after.Estimate, before.Estimate, "a cancelled wait counted nothing")

		// A deadline sooner than the next admission fails at once.
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer dcancel()
		t0 := time.Now()
		require.ErrorIs(t, l.Wait(dctx, "k", 2), context.DeadlineExceeded)
		require.Equal(t, time.Duration(0), time.Since(t0))

		require.ErrorIs(t, l.Wait(ctx, "k", 3), ErrCostAboveLimit, "a wait that can never succeed fails at once")
		require.ErrorIs(t, l.Wait(ctx, "k", -1), ErrNegativeCost)
	})
}

func TestMulti(t *testing.T) {
	clk := clock.NewManual(start)
	perSecond, err := New(policy.SlidingCounter{Limit: 3, Window: time.Second}, WithClock(clk))
	require.NoError(t, err)
	defer perSecond.Close()
	perMinute, err := New(policy.SlidingCounter{Limit: 5, Window: time.Minute}, WithClock(clk))
	require.NoError(t, err)
	defer perMinute.Close()
	m, err := All(perSecond, perMinute)
	require.NoError(t, err)

	for range 3 {
		require.True(t, m.Allow("k"))
	}
	d := m.Take("k", 1)
	require.False(t, d.Allowed)
	require.Equal(t, int64(3), d.Limit, "the per-second limit refused")
	pr, _ := perMinute.Inspect("k")
	require.Equal(t, int64(3), pr.Estimate, "the per-minute limit kept nothing of the refused request")

	clk.Set(start + 2000)
	require.True(t, m.Take("k", 2).Allowed)
	d = m.Take("k", 1)
	require.False(t, d.Allowed)
	require.Equal(t, int64(5), d.Limit, "now the per-minute limit refuses")
	pr, _ = perSecond.Inspect("k")
	require.Equal(t, int64(2), pr.Estimate, "and the per-second one gave its unit back")

	_, err = All()
	require.Error(t, err)
	_, err = All(perSecond, nil)
	require.ErrorContains(t, err, "limiter 1 is nil")
}

// TestMultiConcurrent: whatever the interleaving, once the hammering stops no unit of a refused
// request stays charged: both limiters hold exactly what was admitted.
func TestMultiConcurrent(t *testing.T) {
	clk := clock.NewManual(start)
	a, err := New(policy.SlidingCounter{Limit: 100, Window: time.Second}, WithClock(clk))
	require.NoError(t, err)
	defer a.Close()
	b, err := New(policy.SlidingCounter{Limit: 60, Window: time.Minute}, WithClock(clk))
	require.NoError(t, err)
	defer b.Close()
	m, err := All(a, b)
	require.NoError(t, err)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				cost := int64(1 + (i+w)%2)
				if m.TakeKey(7, cost).Allowed {
					admitted.Add(cost)
				}
			}
		}()
	}
	wg.Wait()
	pa, _ := a.InspectKey(7)
	pb, _ := b.InspectKey(7)
	require.Equal(t, admitted.Load(), pa.Estimate)
	require.Equal(t, admitted.Load(), pb.Estimate)
	require.LessOrEqual(t, admitted.Load(), int64(60))
	require.GreaterOrEqual(t, admitted.Load(), int64(59), "all but a unit the last cost-2 requests could not fit")
}

func TestReasonErr(t *testing.T) {
	require.NoError(t, ReasonOK.Err())
	require.NoError(t, ReasonLimited.Err())
	for _, r := range []Reason{ReasonCostAboveLimit, ReasonNegativeCost, ReasonKeyCap, ReasonClosed, ReasonInvalidLimit} {
		require.Error(t, r.Err(), r.String())
	}
	require.True(t, errors.Is(ReasonKeyCap.Err(), ErrKeyCap))
}

func BenchmarkExtras(b *testing.B) {
	l := newBench(b)
	l.Allow("k")
	b.Run("op=Allow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Allow("k")
		}
	})
	b.Run("op=Take", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Take("k", 1)
		}
	})
	b.Run("op=TakeWithLimit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.TakeWithLimit("k", 1, 1000)
		}
	})
	b.Run("op=Take+Refund", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Refund("k", 1, l.Take("k", 1))
		}
	})
	b.Run("op=Wait", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Wait(ctx, "k", 0)
		}
	})
	other := newBench(b)
	m, _ := All(l, other)
	b.Run("op=Multi2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Allow("k")
		}
	})
}
