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

// epoch is a time in 2026, above 2^40 ms, as a real clock reads.
const epoch = int64(1_764_000_000_000)

// pureCell drives a codec on one cell next to the policy's pure step on a shadow state, with the
// engine's rule for writes: a state changes only when a request is admitted (and, except for the
// dual bucket, costs something). Every result and probe must agree. It also plays the table's
// part: when time has moved on, a dead state is re-encoded (Normalize) as a sweep would, with
// ref the previous sweep's time, so that the cell's wrapping times stay within their horizon.
type pureCell[S any] struct {
	codec  Codec
	cell   *uint64
	s      S
	take   func(*S, int64, int64) policy.Result
	peek   func(S, int64) (policy.Result, policy.Probe)
	writes func(cost int64) bool
	ref    int64
	floor  int64 // the last sweep's time: later reads are not older (see sweep)
}

func newPureCell[S any](codec Codec, now int64, fresh func(int64) S, take func(*S, int64, int64) policy.Result,
	peek func(S, int64) (policy.Result, policy.Probe), writes func(int64) bool) *pureCell[S] {
	c := &pureCell[S]{codec: codec, cell: aligned(), s: fresh(now), take: take, peek: peek, writes: writes, ref: now, floor: now}
	f0, f1 := codec.Fresh(now)
	Store(c.cell, codec.Words(), f0, f1)
	return c
}

func (c *pureCell[S]) step(t require.TestingT, i int, now, cost int64) {
	shadow := c.s
	want := c.take(&shadow, now, cost)
	if want.Allowed && c.writes(cost) {
		c.s = shadow
	}
	got, st := c.codec.Take(c.cell, now, cost)
	require.Equal(t, OK, st)
	require.Equal(t, want, got, "op %d: take(%d) at %d", i, cost, now)
	wr, wp := c.peek(c.s, now)
	gr, gp, st := c.codec.Peek(c.cell, now)
	require.Equal(t, OK, st)
	require.Equal(t, wr, gr, "op %d: peek at %d", i, now)
	require.Equal(t, wp, gp, "op %d: probe at %d", i, now)
}

func (c *pureCell[S]) admit(t require.TestingT, i int, now, cost int64) {
	shadow := c.s
	want := c.take(&shadow, now, cost)
	if want.Allowed && c.writes(cost) {
		c.s = shadow
	}
	got, st := c.codec.Admit(c.cell, now, cost)
	require.Equal(t, OK, st)
	require.Equal(t, want.Allowed, got, "op %d: admit(%d) at %d", i, cost, now)
}

// sweep re-encodes a dead state at now, as a sweep of the table would. A re-encoded state is a
// new key's at now, which a reader with an older clock treats as ahead of it (stricter than the
// dead state it replaced, though only in ResetAt and RetryAfter), so drive keeps later reads at
// or after now.
func (c *pureCell[S]) sweep(now int64) {
	w := c.codec.Words()
	w0, w1 := Load(c.cell, w)
	if c.codec.Dead(w0, w1, c.ref, now) {
		if n0, n1, changed := c.codec.Normalize(w0, w1, now); changed {
			Store(c.cell, w, n0, n1)
		}
	}
	c.ref, c.floor = now, now
}

// drive runs random operations: time mostly moving on by up to scale ms, sometimes back by a few
// ms (a racing goroutine's older clock reading), sometimes jumping by up to a quarter of the
// codec's horizon, with a sweep after each jump.
func drive[S any](t *rapid.T, c *pureCell[S], now, scale, maxCost int64) {
	jump := min(c.codec.Horizon()/4, 1<<42)
	for i := range rapid.IntRange(1, 120).Draw(t, "ops") {
		switch rapid.IntRange(0, 9).Draw(t, "time") {
		case 0:
			now = max(now-rapid.Int64Range(0, 3).Draw(t, "back"), c.floor)
		case 1:
			now += rapid.Int64Range(0, jump).Draw(t, "jump")
			c.sweep(now)
		case 2, 3, 4:
			now += rapid.Int64Range(0, scale).Draw(t, "step")
		}
		var cost int64
		switch rapid.IntRange(0, 3).Draw(t, "costKind") {
		case 0:
			cost = rapid.Int64Range(0, 2).Draw(t, "small")
		case 1:
			cost = maxCost + rapid.Int64Range(0, 1).Draw(t, "edge")
		default:
			cost = rapid.Int64Range(0, maxCost).Draw(t, "cost")
		}
		if rapid.Bool().Draw(t, "full") {
			c.step(t, i, now, cost)
		} else {
			c.admit(t, i, now, cost)
		}
	}
}

var (
	bucketRates  = []int64{1, 3, 7, 100, 1000, 2500, 1 << 20, math.MaxUint32}
	bucketBursts = []int64{1, 2, 5, 100, 1 << 20, math.MaxUint32}
)

func writesIfCost(cost int64) bool { return cost > 0 }

func TestTokenBucketMatchesPolicy(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := policy.TokenBucket{Rate: rapid.SampledFrom(bucketRates).Draw(rt, "rate"), Burst: rapid.SampledFrom(bucketBursts).Draw(rt, "burst")}
		now := rapid.Int64Range(0, 1<<42).Draw(rt, "start")
		c := newPureCell(NewTokenBucket(p), now, rules.TokenBucket(p).Fresh, rules.TokenBucket(p).Take, rules.TokenBucket(p).Peek, writesIfCost)
		drive(rt, c, now, min(rules.TokenBucket(p).FillMs(), 1<<40)/3+1, p.Burst)
	})
}

func TestLeakyBucketMatchesPolicy(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := policy.LeakyBucket{Rate: rapid.SampledFrom(bucketRates).Draw(rt, "rate"), Capacity: rapid.SampledFrom(bucketBursts).Draw(rt, "capacity")}
		now := rapid.Int64Range(0, 1<<42).Draw(rt, "start")
		c := newPureCell(NewLeakyBucket(p), now, rules.LeakyBucket(p).Fresh, rules.LeakyBucket(p).Take, rules.LeakyBucket(p).Peek, writesIfCost)
		drive(rt, c, now, min(rules.LeakyBucket(p).DrainMs(), 1<<40)/3+1, p.Capacity)
	})
}

func TestBucketLayouts(t *testing.T) {
	for _, c := range []struct {
		p       policy.TokenBucket
		words   int
		horizon int64
	}{
		// b = 7, credit in hundreds of thousandths (gcd 100): 4 bits, m = 51.
		{policy.TokenBucket{Rate: 100, Burst: 100}, 1, 1 << 49},
		// b = 32, gcd(2^32-1, 1000) = 5: 8 bits, m = 22; FillMs = 1000 <= 2^19.
		{policy.TokenBucket{Rate: math.MaxUint32, Burst: math.MaxUint32}, 1, 1 << 20},
		// b = 21, the credit is always 0 (0 bits), m = 41; FillMs = 2^20 <= 2^38.
		{policy.TokenBucket{Rate: 1000, Burst: 1 << 20}, 1, 1 << 39},
		// b = 21, 10 bits of credit, m = 31, but FillMs = 2^20*1000 > 2^28.
		{policy.TokenBucket{Rate: 1, Burst: 1 << 20}, 2, math.MaxInt64},
		// b = 32, 10 bits of credit: m = 20, FillMs about 2^42.
		{policy.TokenBucket{Rate: 1, Burst: math.MaxUint32}, 2, math.MaxInt64},
		// m = 20 exactly (b = 32, gcd 1): FillMs must be at most 2^17 = 131072 ms.
		// (Rates ending in 1 and 9 are coprime with 1000; FillMs = 131072 and 131073.)
		{policy.TokenBucket{Rate: 32_768_001, Burst: math.MaxUint32}, 1, 1 << 18},
		{policy.TokenBucket{Rate: 32_767_999, Burst: math.MaxUint32}, 2, math.MaxInt64},
	} {
		codec := NewTokenBucket(c.p)
		require.Equal(t, c.words, codec.Words(), "%+v", c.p)
		require.Equal(t, c.horizon, codec.Horizon(), "%+v", c.p)
		leaky := NewLeakyBucket(policy.LeakyBucket{Rate: c.p.Rate, Capacity: c.p.Burst})
		require.Equal(t, c.words, leaky.Words(), "leaky %+v", c.p)
		require.Equal(t, c.horizon, leaky.Horizon(), "leaky %+v", c.p)
	}
}

// TestBucketWordDecodesNearNow: with m = 22 bits of time (M = 4,194,304 ms), a state is read as
// written up to M/2 - 1 ms before the reader's now, or up to M/2 ms after it (a racing writer).
func TestBucketWordDecodesNearNow(t *testing.T) {
	p := policy.TokenBucket{Rate: math.MaxUint32, Burst: math.MaxUint32}
	codec := NewTokenBucket(p)
	require.Equal(t, int64(1<<20), codec.Horizon())
	cell := aligned()
	f, _ := codec.Fresh(epoch)
	Store(cell, 1, f, 0)
	r, _ := codec.Take(cell, epoch, math.MaxUint32)
	require.True(t, r.Allowed)
	// An older reader (5 ms before the writer) sees the empty bucket as it was written, with no
	// refill, and waits for the writer's time plus a token's refill: 5 + ceil(1000/Rate) = 6 ms.
	r, _ = codec.Take(cell, epoch-5, 1)
	require.False(t, r.Allowed)
	require.Equal(t, int64(6), r.RetryAfterMs)
	// 1 ms later Rate thousandths are in: 4,294,967 tokens (and 295 thousandths).
	_, pr, _ := codec.Peek(cell, epoch+1)
	require.Equal(t, int64(math.MaxUint32/1000), pr.Tokens)
	// Long after, the bucket reads full, up to M/2 - 1 after the write.
	_, pr, _ = codec.Peek(cell, epoch+1<<21-1)
	require.Equal(t, p.Burst, pr.Tokens)
	w0, _ := Load(cell, 1)
	require.False(t, codec.Dead(w0, 0, epoch, epoch+999), "999 ms refill 999 thousandths short of Burst")
	require.True(t, codec.Dead(w0, 0, epoch, epoch+1000))
	// Dead decodes relative to the last sweep, so a late sweeper still judges right.
	require.True(t, codec.Dead(w0, 0, epoch, epoch+3<<20))
	require.False(t, codec.Dead(w0, 0, epoch+1<<20-1, epoch+999), "a sweep may start up to M/4 after the write")
	n0, _, changed := codec.Normalize(w0, 0, epoch+5000)
	require.True(t, changed)
	f, _ = codec.Fresh(epoch + 5000)
	require.Equal(t, f, n0)
}

func TestBucketCellsRefuseWhenNotLive(t *testing.T) {
	for _, codec := range []Codec{
		NewTokenBucket(policy.TokenBucket{Rate: 10, Burst: 5}),
		NewTokenBucket(policy.TokenBucket{Rate: 1, Burst: math.MaxUint32}),
		NewLeakyBucket(policy.LeakyBucket{Rate: 10, Capacity: 5}),
		NewLeakyBucket(policy.LeakyBucket{Rate: 1, Capacity: math.MaxUint32}),
		NewDualBucket(policy.DualBucket{RequestsPerMin: 10, TokensPerMin: 500}),
		NewDualBucket(policy.DualBucket{RequestsPerMin: math.MaxUint32, TokensPerMin: math.MaxUint32}),
		NewGCRA(policy.GCRA{Rate: 10, Burst: 5}),
		NewFixedWindow(policy.FixedWindow{Limit: 5, Window: 1e9}),
	} {
		for _, flag := range []uint64{Dead, Moved} {
			name := fmt.Sprintf("%T/%x", codec, flag)
			cell := aligned()
			f0, f1 := codec.Fresh(epoch)
			Store(cell, codec.Words(), f0, f1)
			_, _, ok := Mark(cell, codec.Words(), flag)
			require.True(t, ok, name)
			want := IsDead
			if flag == Moved {
				want = IsMoved
			}
			_, st := codec.Take(cell, epoch, 1)
			require.Equal(t, want, st, name)
			_, st = codec.Admit(cell, epoch, 1)
			require.Equal(t, want, st, name)
			_, _, st = codec.Peek(cell, epoch)
			require.Equal(t, want, st, name)
			w0, w1 := Load(cell, codec.Words())
			require.Equal(t, f0|flag, w0, "%s: a refusal writes nothing", name)
			require.Equal(t, f1, w1, name)
		}
	}
}

// TestBucketStale: the key cap may evict a bucket only while it holds less than half its burst
// (its capacity) taken.
func TestBucketStale(t *testing.T) {
	tb := NewTokenBucket(policy.TokenBucket{Rate: 10, Burst: 2})
	cell := aligned()
	f, _ := tb.Fresh(epoch)
	Store(cell, 1, f, 0)
	tb.Take(cell, epoch, 2)
	w, _ := Load(cell, 1)
	age, ok := tb.Stale(w, 0, epoch+50, 0)
	require.Equal(t, int64(50), age)
	require.False(t, ok, "50 ms at 10/s is half a token: still at its limit")
	_, ok = tb.Stale(w, 0, epoch+199, 0)
	require.False(t, ok, "one token of two refilled: half the burst still taken")
	_, ok = tb.Stale(w, 0, epoch+200, 0)
	require.True(t, ok)

	lb := NewLeakyBucket(policy.LeakyBucket{Rate: 10, Capacity: 2})
	f, _ = lb.Fresh(epoch)
	Store(cell, 1, f, 0)
	lb.Take(cell, epoch, 2)
	w, _ = Load(cell, 1)
	_, ok = lb.Stale(w, 0, epoch+199, 0)
	require.False(t, ok, "level 1 of 2: half the capacity")
	_, ok = lb.Stale(w, 0, epoch+200, 0)
	require.True(t, ok)
}

func ExampleNewTokenBucket() {
	codec := NewTokenBucket(policy.TokenBucket{Rate: 10, Burst: 2})
	now := int64(1_764_000_000_000)
	cell, _ := codec.Fresh(now)
	for _, dt := range []int64{0, 0, 0, 100} {
		r, _ := codec.Take(&cell, now+dt, 1)
		fmt.Print(r.Allowed, " ", r.RetryAfterMs, "; ")
	}
	fmt.Println(codec.Words())
	// Output: true 0; true 0; false 100; true 0; 1
}
