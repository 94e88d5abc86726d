package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	slatomic "github.com/slidelimit/slidelimit/atomic"
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

// TestWithMaxLimitPerPolicy: the fixed window takes WithMaxLimit up to its own Limit (its cells
// take per-key limits that far already) and refuses more, naming its Limit; a policy without
// per-key limits refuses any; the errors name the policy.
func TestWithMaxLimitPerPolicy(t *testing.T) {
	fw := policy.FixedWindow{Limit: 10, Window: time.Second}
	for _, n := range []int64{1, 10} {
		l, err := New(fw, WithMaxLimit(n))
		require.NoError(t, err, "WithMaxLimit(%d)", n)
		require.True(t, l.TakeWithLimit("k", 1, n).Allowed)
		require.Equal(t, ReasonInvalidLimit, l.TakeWithLimit("k", 1, 11).Reason)
		l.Close()
	}
	_, err := New(fw, WithMaxLimit(11))
	require.ErrorContains(t, err, `WithMaxLimit(11): policy "fixed-window" takes per-key limits up to its own Limit (10) only`)
	_, err = New(policy.TokenBucket{Rate: 10, Burst: 10}, WithMaxLimit(5))
	require.ErrorContains(t, err, `WithMaxLimit(5): policy "token-bucket" takes no per-key limits`)
	// The sliding counter takes any n, below its own Limit too.
	sc, err := New(policy.SlidingCounter{Limit: 100, Window: time.Second}, WithMaxLimit(50))
	require.NoError(t, err)
	d := sc.TakeWithLimit("k", 1, 50)
	require.True(t, d.Allowed)
	require.Equal(t, int64(49), d.Remaining)
	sc.Close()
}

func TestRefund(t *testing.T) {
	l, clk := newSC(t, 5, time.Second)
	d := l.Take("k", 3)
	require.True(t, d.Allowed)
	require.Equal(t, int64(3), l.Refund("k", 3, d))
	d = l.Take("k", 5)
	require.True(t, d.Allowed, "the refunded units are available again")

	// Counted in the previous window, the units still weigh on the estimate; refunded, they do not.
	clk.Set(start + 1000 + 500)
	pr, _ := l.Inspect("k")
	require.Equal(t, int64(2), pr.Estimate) // floor(5*500/1000)
	require.Equal(t, int64(5), l.Refund("k", 5, d))
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

// TestRefundPerPolicyHandWorked checks each policy's refund rule on cases worked by hand.
func TestRefundPerPolicyHandWorked(t *testing.T) {
	mk := func(p policy.Policy) (*Limiter, *clock.Clock) {
		clk := clock.NewManual(start)
		l, err := New(p, WithClock(clk), WithEviction(false))
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l, clk
	}

	t.Run("fixed-window", func(t *testing.T) {
		l, clk := mk(policy.FixedWindow{Limit: 5, Window: time.Second})
		d := l.Take("k", 3)
		require.Equal(t, int64(3), l.Refund("k", 3, d))
		require.True(t, l.AllowN("k", 5), "all 5 are free again")
		clk.Set(start + 999)
		require.Equal(t, int64(2), l.Refund("k", 2, d), "the charged window is still the current one")
		clk.Set(start + 1000)
		d = l.Take("k", 4)
		clk.Set(start + 2000)
		require.Equal(t, int64(0), l.Refund("k", 4, d), "the charged window has ended")
	})

	t.Run("token-bucket", func(t *testing.T) {
		// Rate 1/s, Burst 10. Take 5 from a full bucket at start: resetAt = start + 5000.
		l, clk := mk(policy.TokenBucket{Rate: 1, Burst: 10})
		d := l.Take("k", 5)
		require.Equal(t, start+5000, d.ResetAt.UnixMilli())
		require.Equal(t, int64(5), l.Refund("k", 5, d), "at once: all of it")
		d = l.Take("k", 5)
		// 2 s on, the bucket that never saw the 5 would have been full since start (losing
		// 2 tokens of refill); both take 1, leaving it at 9 and the charged one at 5+2-1 = 6.
		// Only 3 are exact: floor((1*(5000-2000-1) + gcd(1, 1000)) / 1000) = 3, and 6+3 = 9.
		// Capped at the burst, adding 5 would give 10.
		clk.Set(start + 2000)
		require.True(t, l.Take("k", 1).Allowed)
		require.Equal(t, int64(3), l.Refund("k", 5, d))
		pr, _ := l.Inspect("k")
		require.Equal(t, int64(9), pr.Tokens)
		clk.Set(start + 5000)
		require.Equal(t, int64(0), l.Refund("k", 5, d), "past resetAt nothing is exact")
	})

	t.Run("gcra", func(t *testing.T) {
		// The same case as the token bucket's: GCRA makes the same decisions.
		l, clk := mk(policy.GCRA{Rate: 1, Burst: 10})
		d := l.Take("k", 5)
		require.Equal(t, start+5000, d.ResetAt.UnixMilli())
		require.Equal(t, int64(5), l.Refund("k", 5, d))
		d = l.Take("k", 5)
		clk.Set(start + 2000)
		require.True(t, l.Take("k", 1).Allowed)
		require.Equal(t, int64(3), l.Refund("k", 5, d))
		pr, _ := l.Inspect("k")
		require.Equal(t, int64(9), pr.Tokens)
	})

	t.Run("leaky-bucket", func(t *testing.T) {
		// Rate 1/s, Capacity 10. Add 5 to an empty bucket: resetAt = start + 5000. 2 s on, the
		// bucket that never saw them would have been empty since start; both add 1, leaving it at
		// 1 and the charged one at 5-2+1 = 4. Exact: 3 (4-3 = 1); floored at 0, 5 would give 0.
		l, clk := mk(policy.LeakyBucket{Rate: 1, Capacity: 10})
		d := l.Take("k", 5)
		require.Equal(t, start+5000, d.ResetAt.UnixMilli())
		require.Equal(t, int64(5), l.Refund("k", 5, d))
		d = l.Take("k", 5)
		clk.Set(start + 2000)
		require.True(t, l.Take("k", 1).Allowed)
		require.Equal(t, int64(3), l.Refund("k", 5, d))
		pr, _ := l.Inspect("k")
		require.Equal(t, int64(1), pr.Level)
	})
}

// TestRefundIsExactPerPolicy: for every policy that refunds, a limiter that admitted requests and
// then refunded them is, from then on, indistinguishable from one that saw only the admitted
// requests, each refunded one with its cost less what the refund gave back. That second limiter
// is rebuilt by replaying the log on its own clock: reduced costs only leave more room, so every
// logged request must be admitted again.
func TestRefundIsExactPerPolicy(t *testing.T) {
	cases := []struct {
		p     policy.Policy
		words int   // the cell width the case exercises
		tick  int64 // the largest step of the clock, ms
	}{
		{policy.FixedWindow{Limit: 5, Window: time.Second}, 1, 700},
		{policy.TokenBucket{Rate: 7, Burst: 5}, 1, 400},  // 7 does not divide 1000: partial refunds
		{policy.TokenBucket{Rate: 1000, Burst: 5}, 1, 3}, // 1 token a ms
		{policy.TokenBucket{Rate: 3, Burst: 1 << 22}, 2, 1_000_000_000},
		{policy.GCRA{Rate: 7, Burst: 5}, 1, 400},
		{policy.GCRA{Rate: 1000, Burst: 5}, 1, 3},
		{policy.LeakyBucket{Rate: 7, Capacity: 5}, 1, 400},
		{policy.LeakyBucket{Rate: 3, Capacity: 1 << 22}, 2, 1_000_000_000},
	}
	for _, tc := range cases {
		var codec slatomic.Codec
		var limit int64
		switch p := tc.p.(type) {
		case policy.FixedWindow:
			codec, limit = slatomic.NewFixedWindow(p), p.Limit
		case policy.TokenBucket:
			codec, limit = slatomic.NewTokenBucket(p), p.Burst
		case policy.GCRA:
			codec, limit = slatomic.NewGCRA(p), p.Burst
		case policy.LeakyBucket:
			codec, limit = slatomic.NewLeakyBucket(p), p.Capacity
		}
		require.Equal(t, tc.words, codec.Words(), "%+v", tc.p)
		_, ok := codec.(slatomic.Refunder)
		require.True(t, ok, "%+v", tc.p)

		t.Run(fmt.Sprintf("%s/%+v", tc.p.ID(), tc.p), func(t *testing.T) {
			var given atomic.Int64
			rapid.Check(t, func(rt *rapid.T) {
				clk := clock.NewManual(start)
				a, err := New(tc.p, WithClock(clk), WithEviction(false))
				require.NoError(rt, err)
				defer a.Close()
				type req struct{ at, cost int64 }
				var log []req // admitted requests, at their cost net of refunds
				var pending []struct {
					d   Decision
					idx int
				}
				for i := range rapid.IntRange(1, 60).Draw(rt, "ops") {
					clk.Advance(time.Duration(rapid.Int64Range(0, tc.tick).Draw(rt, "tick")) * time.Millisecond)
					now := clk.Now()
					switch op := rapid.IntRange(0, 2).Draw(rt, "op"); {
					case op < 2: // a request, refunded later when op is 1
						cost := rapid.Int64Range(0, limit).Draw(rt, "cost")
						d := a.Take("k", cost)
						if d.Allowed {
							log = append(log, req{now, cost})
							if op == 1 && cost > 0 {
								pending = append(pending, struct {
									d   Decision
									idx int
								}{d, len(log) - 1})
							}
						}
					default:
						for _, p := range pending {
							c := log[p.idx].cost
							g := a.Refund("k", c, p.d)
							require.GreaterOrEqual(rt, g, int64(0))
							require.LessOrEqual(rt, g, c)
							log[p.idx].cost -= g
							given.Add(g)
						}
						pending = pending[:0]
						rclk := clock.NewManual(start)
						b, err := New(tc.p, WithClock(rclk), WithEviction(false))
						require.NoError(rt, err)
						for j, r := range log {
							rclk.Set(r.at)
							require.True(rt, b.Take("k", r.cost).Allowed, "op %d: replayed request %d", i, j)
						}
						rclk.Set(now)
						require.Equal(rt, b.Peek("k"), a.Peek("k"), "op %d: after the refunds a and the replay must agree", i)
						pa, _ := a.Inspect("k")
						pb, _ := b.Inspect("k")
						require.Equal(rt, pb, pa, "op %d", i)
						b.Close()
					}
				}
			})
			// Without this, a refund that never gives anything back would pass the replay.
			require.Positive(t, given.Load(), "some refund gave units back")
		})
	}
}

// TestMultiMixedPolicies: over a token bucket per second and a fixed window per hour, in either
// order, a request one of them refuses leaves no unit charged in the other.
func TestMultiMixedPolicies(t *testing.T) {
	clk := clock.NewManual(start)
	mk := func(p policy.Policy) *Limiter {
		l, err := New(p, WithClock(clk))
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l
	}
	tb := mk(policy.TokenBucket{Rate: 10, Burst: 10})
	fw := mk(policy.FixedWindow{Limit: 5, Window: time.Hour})
	m, err := All(tb, fw)
	require.NoError(t, err)

	// start is a whole hour (1,764,000,000,000 ms = 490,000 h): the window holds 5 this hour.
	require.True(t, m.Take("k", 3).Allowed)
	require.True(t, m.Take("k", 2).Allowed)
	d := m.Take("k", 1)
	require.False(t, d.Allowed)
	require.Equal(t, int64(5), d.Limit, "the hourly window refused")
	pr, _ := tb.Inspect("k")
	require.Equal(t, int64(5), pr.Tokens, "the bucket gave its token back: 10 - 5 admitted")

	// A second later the bucket is full again; the window still refuses, and the bucket keeps
	// its 10 through any number of refused requests.
	clk.Set(start + 1000)
	for range 20 {
		require.False(t, m.Take("k", 2).Allowed)
	}
	pr, _ = tb.Inspect("k")
	require.Equal(t, int64(10), pr.Tokens)

	// The other order: the bucket refuses and the window gives back what it counted.
	fw2 := mk(policy.FixedWindow{Limit: 100, Window: time.Hour})
	m2, err := All(fw2, tb)
	require.NoError(t, err)
	require.True(t, tb.Take("j", 10).Allowed) // empty j's bucket outside the Multi
	for range 3 {
		d = m2.Take("j", 2)
		require.False(t, d.Allowed)
		require.Equal(t, int64(10), d.Limit, "the empty bucket refused")
	}
	fp, _ := fw2.Inspect("j")
	require.Equal(t, int64(0), fp.Count, "the window kept nothing of the 3 refused requests")
	clk.Set(start + 1000 + 100) // 100 ms at 10 a second: one token
	require.True(t, m2.Take("j", 1).Allowed)
	fp, _ = fw2.Inspect("j")
	require.Equal(t, int64(1), fp.Count, "only the admitted unit is counted")
}

// TestTakeWithLimitFixedWindow: the fixed window takes per-key limits up to its own.
func TestTakeWithLimitFixedWindow(t *testing.T) {
	clk := clock.NewManual(start)
	l, err := New(policy.FixedWindow{Limit: 10, Window: time.Second}, WithClock(clk))
	require.NoError(t, err)
	defer l.Close()
	for i := range 3 {
		d := l.TakeWithLimit("small", 1, 3)
		require.True(t, d.Allowed, "request %d", i)
		require.Equal(t, int64(3), d.Limit)
		require.Equal(t, int64(2-i), d.Remaining)
	}
	d := l.TakeWithLimit("small", 1, 3)
	require.False(t, d.Allowed)
	require.Equal(t, ReasonLimited, d.Reason)
	require.Equal(t, time.Second, d.RetryAfter, "the window ends at start + 1000")
	require.True(t, l.Take("small", 7).Allowed, "at the policy's limit the key has 10 - 3 left")

	// Counted at 10, then lowered to 5: refused with nothing remaining until the next window.
	require.True(t, l.Take("big", 8).Allowed)
	d = l.TakeWithLimit("big", 1, 5)
	require.False(t, d.Allowed)
	require.Equal(t, int64(0), d.Remaining)
	clk.Set(start + 1000)
	d = l.TakeWithLimit("big", 5, 5)
	require.True(t, d.Allowed)
	require.Equal(t, int64(0), d.Remaining)

	require.Equal(t, ReasonInvalidLimit, l.TakeWithLimit("x", 1, 11).Reason, "above the policy's limit")
	require.Equal(t, ReasonInvalidLimit, l.TakeWithLimit("x", 1, 0).Reason)
	_, tracked := l.Inspect("x")
	require.False(t, tracked)

	// Refunds work at a per-key limit too: the count is units, whatever the limit.
	d = l.TakeWithLimit("r", 2, 2)
	require.Equal(t, int64(2), l.Refund("r", 2, d))
	require.True(t, l.TakeWithLimit("r", 2, 2).Allowed)
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

		// A nil ctx is context.Background(), as in redisstore, not a panic.
		//lint:ignore SA1012 the nil ctx is what is tested
		require.NoError(t, l.Wait(nil, "fresh", 1))
		//lint:ignore SA1012 the nil ctx is what is tested
		require.NoError(t, l.WaitKey(nil, 7, 1))
	})
}

// TestWaitWokenByClose: a waiter asleep until its key's window ends returns ErrClosed as soon as
// the limiter is closed, not when its timer fires an hour later.
func TestWaitWokenByClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewCoarse(time.Millisecond)
		defer clk.Stop()
		l, err := New(policy.FixedWindow{Limit: 1, Window: time.Hour}, WithClock(clk))
		require.NoError(t, err)
		require.True(t, l.Allow("k"))
		errc := make(chan error, 1)
		go func() { errc <- l.Wait(context.Background(), "k", 1) }()
		synctest.Wait() // the waiter is asleep
		begin := time.Now()
		require.NoError(t, l.Close())
		require.ErrorIs(t, <-errc, ErrClosed)
		require.Less(t, time.Since(begin), time.Second, "woken by Close, not by its timer")
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

// TestZeroMultiRefusesAsClosed: a Multi not made by All limits nothing, so it refuses, saying why.
func TestZeroMultiRefusesAsClosed(t *testing.T) {
	for name, m := range map[string]*Multi{"zero": {}, "nil": nil} {
		d := m.Take("k", 1)
		require.False(t, d.Allowed, name)
		require.Equal(t, ReasonClosed, d.Reason, name)
		require.Equal(t, ReasonClosed, m.TakeKey(1, 1).Reason, name)
		require.False(t, m.Allow("k"), name)
	}
}

// TestMultiCostNoWaitAdmits: a cost above one limiter's limit is refused by that limiter, for its
// cost and with no RetryAfter, also when an earlier limiter is used up and would have refused
// with a wait: no wait admits the request. Nothing is counted anywhere.
func TestMultiCostNoWaitAdmits(t *testing.T) {
	clk := clock.NewManual(start)
	mk := func(limit int64) *Limiter {
		l, err := New(policy.SlidingCounter{Limit: limit, Window: 10 * time.Second}, WithClock(clk))
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b := mk(5), mk(2)
	require.True(t, a.Take("k", 5).Allowed) // a used up
	for _, order := range [][]*Limiter{{a, b}, {b, a}} {
		m, err := All(order...)
		require.NoError(t, err)
		d := m.Take("k", 3)
		require.False(t, d.Allowed)
		require.Equal(t, ReasonCostAboveLimit, d.Reason)
		require.Equal(t, int64(2), d.Limit, "b, the limit the cost is above")
		require.Zero(t, d.RetryAfter)
	}
	require.Equal(t, int64(2), b.Peek("k").Remaining, "b counted nothing")
	require.Equal(t, int64(0), a.Peek("k").Remaining)
}

// TestMultiWithAClosedLimiter: a Multi one of whose limiters is closed answers ReasonClosed,
// with that limiter's limit, before it looks at the cost, as a closed Limiter does and as
// redisstore's Multi does; the open limiter counts nothing.
func TestMultiWithAClosedLimiter(t *testing.T) {
	clk := clock.NewManual(start)
	open, err := New(policy.SlidingCounter{Limit: 5, Window: time.Hour}, WithClock(clk))
	require.NoError(t, err)
	defer open.Close()
	closed, err := New(policy.FixedWindow{Limit: 10, Window: time.Hour}, WithClock(clk))
	require.NoError(t, err)
	for _, order := range [][]*Limiter{{open, closed}, {closed, open}} {
		m, err := All(order...)
		require.NoError(t, err)
		require.NoError(t, closed.Close())
		for _, n := range []int64{-1, 0, 1, 6, 11} {
			d := m.Take("k", n)
			require.Equal(t, Decision{Limit: 10, Reason: ReasonClosed}, d, "cost %d", n)
			require.Equal(t, ReasonClosed, m.TakeKey(7, n).Reason, "TakeKey, cost %d", n)
		}
	}
	require.Equal(t, int64(5), open.Peek("k").Remaining, "the open limiter counted a refused request")
}
