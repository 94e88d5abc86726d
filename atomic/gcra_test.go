package atomic

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

func TestGCRAMatchesPolicy(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := policy.GCRA{Rate: rapid.SampledFrom(bucketRates).Draw(rt, "rate"), Burst: rapid.SampledFrom(bucketBursts).Draw(rt, "burst")}
		codec := NewGCRA(p)
		require.Equal(rt, 1, codec.Words(), "GCRA is one word for every configuration")
		require.Equal(rt, int64(1<<59)/p.Rate, codec.Horizon())
		now := rapid.Int64Range(0, 1<<42).Draw(rt, "start")
		fill := rules.GCRA(p).FillMs()
		c := newPureCell(codec, now, rules.GCRA(p).Fresh, rules.GCRA(p).Take, rules.GCRA(p).Peek, writesIfCost)
		drive(rt, c, now, min(fill, 1<<40)/3+1, p.Burst)
	})
}

// TestGCRAWordWraps: at the largest rate a TAT of today's times is above 2^72; the cell keeps it
// modulo 2^62, and the lag stays exact on both sides of now.
func TestGCRAWordWraps(t *testing.T) {
	p := policy.GCRA{Rate: math.MaxUint32, Burst: 3}
	codec := NewGCRA(p)
	require.Equal(t, int64(1<<27), codec.Horizon(), "2^59 / (2^32-1) ms")
	cell := aligned()
	f, _ := codec.Fresh(epoch)
	Store(cell, 1, f, 0)
	r, _ := codec.Take(cell, epoch, 3)
	require.True(t, r.Allowed)
	// The lag is 3000 units; one permit comes back after ceil(1000 / Rate) = 1 ms.
	r, _ = codec.Take(cell, epoch, 1)
	require.False(t, r.Allowed)
	require.Equal(t, int64(1), r.RetryAfterMs)
	// A reader 2 ms behind the writer sees a larger lag (GCRA is the stricter on older times).
	_, pr, _ := codec.Peek(cell, epoch-2)
	require.Equal(t, int64(0), pr.Tokens)
	_, pr, _ = codec.Peek(cell, epoch+1)
	require.Equal(t, int64(3), pr.Tokens, "one ms at 2^32-1 units a ms fills all 3000")
	// A full bucket read a horizon and a half later still reads full, not as a wrapped deficit.
	later := epoch + codec.Horizon()*3/2
	_, pr, _ = codec.Peek(cell, later)
	require.Equal(t, int64(3), pr.Tokens)
	w, _ := Load(cell, 1)
	require.False(t, codec.Dead(w, 0, epoch, epoch))
	require.True(t, codec.Dead(w, 0, epoch, epoch+1))
	require.True(t, codec.Dead(w, 0, epoch, later), "Dead decodes relative to the sweep, not to now")
	n, _, changed := codec.Normalize(w, 0, later)
	require.True(t, changed)
	Store(cell, 1, n, 0)
	r, _ = codec.Take(cell, later, 3)
	require.True(t, r.Allowed)
	require.Equal(t, later+1, r.ResetAtMs, "3000 units at 2^32-1 a ms: full again 1 ms later")
}

func TestGCRARefusesAboveBurstBeforeLookup(t *testing.T) {
	codec := NewGCRA(policy.GCRA{Rate: 10, Burst: 5})
	cc, ok := codec.(CostChecker)
	require.True(t, ok)
	require.Equal(t, int64(5), cc.MaxCost())
	for _, cost := range []int64{0, 1, 4, 5, 6, 7, math.MaxInt64} {
		p := policy.GCRA{Rate: 10, Burst: 5}
		require.Equal(t, rules.GCRA(p).CheckCost(cost), cost <= cc.MaxCost(), "cost %d", cost)
	}
	for _, other := range []Codec{
		NewTokenBucket(policy.TokenBucket{Rate: 10, Burst: 5}),
		NewFixedWindow(policy.FixedWindow{Limit: 5, Window: 1e9}),
		NewSlidingLog(policy.SlidingLog{Limit: 5, Window: 1e9}),
	} {
		_, ok := other.(CostChecker)
		require.False(t, ok, "%T creates the key even for a cost it refuses", other)
	}
}

// TestGCRAStale orders keys by the refill they hold and never offers one at its limit.
func TestGCRAStale(t *testing.T) {
	codec := NewGCRA(policy.GCRA{Rate: 10, Burst: 2})
	cell := aligned()
	f, _ := codec.Fresh(epoch)
	Store(cell, 1, f, 0)
	codec.Take(cell, epoch, 2)
	w, _ := Load(cell, 1)
	age, ok := codec.Stale(w, 0, epoch+50, 0)
	require.Equal(t, int64(50), age, "(2000 - (2000 - 500)) / 10")
	require.False(t, ok)
	_, ok = codec.Stale(w, 0, epoch+100, 0)
	require.False(t, ok, "one permit of two taken: half the burst")
	age, ok = codec.Stale(w, 0, epoch+199, 0)
	require.Equal(t, int64(199), age)
	require.False(t, ok, "0.01 of a permit still taken: one whole permit held, half the burst")
	_, ok = codec.Stale(w, 0, epoch+200, 0)
	require.True(t, ok, "a full bucket")
}

func ExampleNewGCRA() {
	codec := NewGCRA(policy.GCRA{Rate: 10, Burst: 2})
	now := int64(1_764_000_000_000)
	cell, _ := codec.Fresh(now)
	for _, dt := range []int64{0, 0, 0, 100} {
		r, _ := codec.Take(&cell, now+dt, 1)
		fmt.Print(r.Allowed, " ", r.RetryAfterMs, "; ")
	}
	fmt.Println(codec.Words())
	// Output: true 0; true 0; false 100; true 0; 1
}

// TestGCRADeadForALateSweeper: a sweep that starts long after the previous one (a paused
// process) still judges a state exactly, although the lag at its time exceeds 64 bits.
func TestGCRADeadForALateSweeper(t *testing.T) {
	p := policy.GCRA{Rate: math.MaxUint32, Burst: 2}
	codec := NewGCRA(p)
	f, _ := codec.Fresh(0)
	w := f + 2000 // a TAT 2000 units after time 0: the bucket is short until 1 ms
	require.False(t, codec.Dead(w, 0, 0, 0))
	require.True(t, codec.Dead(w, 0, 0, 1))
	for _, now := range []int64{1 << 31, 1 << 40, 1 << 62} {
		require.True(t, codec.Dead(w, 0, 0, now), "now %d", now)
		require.True(t, codec.Dead(f, 0, 0, now), "now %d", now)
	}
	// A sweep whose time reads earlier than its ref (a clock set back) keeps the state.
	g, _ := codec.Fresh(1 << 40)
	require.False(t, codec.Dead(g, 0, 1<<40, 1<<40-5))
	require.True(t, codec.Dead(g, 0, 1<<40, 1<<40))
}
