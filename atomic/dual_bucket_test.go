package atomic

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

func TestDualBucketMatchesPolicy(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := policy.DualBucket{
			RequestsPerMin: rapid.SampledFrom([]int64{1, 3, 7, 60, 500, 1 << 20, math.MaxUint32}).Draw(rt, "rpm"),
			TokensPerMin:   rapid.SampledFrom([]int64{1, 13, 1000, 30_000, 100_000, 1 << 20, math.MaxUint32}).Draw(rt, "tpm"),
		}
		now := rapid.Int64Range(0, 1<<42).Draw(rt, "start")
		c := newPureCell(NewDualBucket(p), now, rules.DualBucket(p).Fresh, rules.DualBucket(p).Take, rules.DualBucket(p).Peek, func(int64) bool { return true })
		drive(rt, c, now, 20_000, p.TokensPerMin)
	})
}

func TestDualBucketLayouts(t *testing.T) {
	for _, c := range []struct {
		rpm, tpm int64
		words    int
		horizon  int64
	}{
		// 6 + 17 bits of counts; credits in units of gcd(60, 60000) = 60 (10 bits) and
		// gcd(100000, 60000) = 20000 (2 bits): m = 62 - 35 = 27.
		{60, 100_000, 1, 1 << 25},
		// 9 + 15 bits; gcd 500 (7 bits) and 30000 (1 bit): m = 30.
		{500, 30_000, 1, 1 << 28},
		// 3 + 4 bits; both rates coprime with 60000 (16 bits each): m = 23.
		{7, 13, 1, 1 << 21},
		// 5 + 5 bits and 16 + 16: m = 20, the least one word takes.
		{31, 31, 1, 1 << 18},
		// 5 + 6 bits and 16 + 16: m = 19, too few.
		{31, 37, 2, 1 << 28},
		{math.MaxUint32, math.MaxUint32, 2, 1 << 28},
		// 21 + 21 bits; gcd(2^20, 60000) = 32: 11 bits each, m = 62 - 64: two words.
		{1 << 20, 1 << 20, 2, 1 << 28},
	} {
		codec := NewDualBucket(policy.DualBucket{RequestsPerMin: c.rpm, TokensPerMin: c.tpm})
		require.Equal(t, c.words, codec.Words(), "%d/%d", c.rpm, c.tpm)
		require.Equal(t, c.horizon, codec.Horizon(), "%d/%d", c.rpm, c.tpm)
	}
}

// TestDualBucketCostZeroSpendsARequest: unlike the other policies, an admitted call of cost 0
// writes its cell.
func TestDualBucketCostZeroSpendsARequest(t *testing.T) {
	for _, p := range []policy.DualBucket{{RequestsPerMin: 2, TokensPerMin: 10}, {RequestsPerMin: math.MaxUint32, TokensPerMin: 10}} {
		codec := NewDualBucket(p)
		cell := aligned()
		f0, f1 := codec.Fresh(epoch)
		Store(cell, codec.Words(), f0, f1)
		ok, _ := codec.Admit(cell, epoch, 0)
		require.True(t, ok)
		r, _ := codec.Take(cell, epoch, 0)
		require.True(t, r.Allowed)
		_, pr, _ := codec.Peek(cell, epoch)
		require.Equal(t, p.RequestsPerMin-2, pr.Requests)
		require.Equal(t, int64(10), pr.Tokens)
	}
}

// TestDualBucketWraps: two words keep the time modulo 2^30 ms; a state is read correctly up to
// 2^29 - 1 ms after its write and judged by Dead relative to the sweep.
func TestDualBucketWraps(t *testing.T) {
	p := policy.DualBucket{RequestsPerMin: math.MaxUint32, TokensPerMin: math.MaxUint32}
	codec := NewDualBucket(p)
	cell := aligned()
	f0, f1 := codec.Fresh(epoch)
	Store(cell, 2, f0, f1)
	r, _ := codec.Take(cell, epoch, math.MaxUint32)
	require.True(t, r.Allowed)
	_, pr, _ := codec.Peek(cell, epoch+30_000)
	require.Equal(t, int64(math.MaxUint32/2), pr.Tokens, "half a minute refills half, floored")
	_, pr, _ = codec.Peek(cell, epoch+1<<29-1)
	require.Equal(t, p.TokensPerMin, pr.Tokens)
	r, _ = codec.Take(cell, epoch-3, 1)
	require.False(t, r.Allowed, "a reader 3 ms behind the writer sees the buckets as written")
	require.Equal(t, int64(3+1), r.RetryAfterMs, "3 ms to the write, then ceil(60000/(2^32-1)) = 1")
	w0, w1 := Load(cell, 2)
	require.False(t, codec.Dead(w0, w1, epoch, epoch+59_999))
	require.True(t, codec.Dead(w0, w1, epoch, epoch+60_000))
	require.True(t, codec.Dead(w0, w1, epoch, epoch+3<<28))
	n0, n1, changed := codec.Normalize(w0, w1, epoch+3<<28)
	require.True(t, changed)
	f0, f1 = codec.Fresh(epoch + 3<<28)
	require.Equal(t, [2]uint64{f0, f1}, [2]uint64{n0, n1})
}
