package engine

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// TestPeekNIsWhatTakeWouldGet: for every policy, on a few keys under random traffic and time
// jumps, PeekN(key, n) reports the Allowed, RetryAfter and Reason that Take(key, n) then gets at
// the same instant, and Peek's Remaining and ResetAt; it changes nothing (Peek reads the same
// before and after it, and the key count is unchanged); and PeekN(key, 1) is Peek(key).
func TestPeekNIsWhatTakeWouldGet(t *testing.T) {
	for _, id := range append([]string{"sliding-counter"}, pcIDs...) {
		t.Run(id, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				var p policy.Policy
				var limit, scale int64
				if id == "sliding-counter" {
					sc := policy.SlidingCounter{
						Limit:  rapid.SampledFrom([]int64{1, 2, 3, 100, 1<<21 - 1, 1<<21 + 1, math.MaxUint32}).Draw(rt, "limit"),
						Window: ms(rapid.SampledFrom(pcWindow).Draw(rt, "windowMs")),
					}
					p, limit, scale = sc, sc.Limit, sc.Window.Milliseconds()
				} else {
					p = drawPolicy(rt, id)
					_, limit, scale = modelOf(p)
				}
				clk := clock.NewManual(rapid.Int64Range(0, 1<<42).Draw(rt, "start"))
				l, err := New(p, WithClock(clk), WithEviction(rapid.Bool().Draw(rt, "evict")), WithSweepInterval(time.Hour))
				require.NoError(rt, err)
				defer l.Close()
				for i := range rapid.IntRange(1, 60).Draw(rt, "ops") {
					if rapid.Bool().Draw(rt, "move") {
						advance(clk, rapid.Int64Range(0, min(scale, 1<<40)/2+1).Draw(rt, "tick"))
					}
					key := strconv.Itoa(rapid.IntRange(0, 2).Draw(rt, "key"))
					cost := drawCost(rt, limit)
					keys, before := l.Len(), l.Peek(key)
					peek := l.PeekN(key, cost)
					require.Equal(rt, before, l.Peek(key), "op %d: PeekN(%q, %d) changed the key", i, key, cost)
					require.Equal(rt, keys, l.Len(), "op %d: PeekN(%q, %d) changed the key count", i, key, cost)
					require.Zero(rt, peek.Counted, "op %d", i)
					if cost == 1 {
						require.Equal(rt, before, peek, "op %d: PeekN(%q, 1) is Peek", i, key)
					}
					if peek.QuotaKnown() {
						require.Equal(rt, before.Remaining, peek.Remaining, "op %d: PeekN(%q, %d)'s Remaining is Peek's", i, key, cost)
						require.Equal(rt, before.ResetAt, peek.ResetAt, "op %d: PeekN(%q, %d)'s ResetAt is Peek's", i, key, cost)
					}
					took := l.Take(key, cost)
					require.Equal(rt, took.Allowed, peek.Allowed, "op %d: %q cost %d: PeekN %+v, Take %+v", i, key, cost, peek, took)
					require.Equal(rt, took.Reason, peek.Reason, "op %d: %q cost %d: PeekN %+v, Take %+v", i, key, cost, peek, took)
					require.Equal(rt, took.RetryAfter, peek.RetryAfter, "op %d: %q cost %d: PeekN %+v, Take %+v", i, key, cost, peek, took)
				}
			})
		})
	}
}

// PeekN's bad input is refused as Take's is: a negative cost, a cost above what GCRA can ever
// admit (before any lookup), and any call after Close.
func TestPeekNRefuses(t *testing.T) {
	l, err := New(policy.GCRA{Rate: 10, Burst: 5})
	require.NoError(t, err)
	require.Equal(t, ReasonNegativeCost, l.PeekN("k", -1).Reason)
	d := l.PeekN("k", 6)
	require.Equal(t, ReasonCostAboveLimit, d.Reason)
	require.False(t, d.QuotaKnown())
	require.Zero(t, l.Len(), "a peek creates no key")
	d = l.PeekN("k", 5)
	require.True(t, d.Allowed, "a new key has its whole burst")
	require.NoError(t, l.Close())
	require.Equal(t, ReasonClosed, l.PeekN("k", 1).Reason)
	require.Equal(t, ReasonClosed, l.PeekN("k", -1).Reason, "after Close, every call answers ReasonClosed")
}
