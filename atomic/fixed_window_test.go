package atomic

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

func TestFixedWindowMatchesPolicy(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.SampledFrom([]int64{1, 2, 3, 100, 1<<21 - 1, math.MaxUint32}).Draw(rt, "limit")
		w := rapid.SampledFrom([]int64{1, 2, 7, 1000, 60_000, 2_592_000_000, 1 << 31, 1 << 32}).Draw(rt, "windowMs")
		p := policy.FixedWindow{Limit: limit, Window: time.Duration(w) * time.Millisecond}
		now := rapid.Int64Range(0, 1<<42).Draw(rt, "start")
		c := newPureCell(NewFixedWindow(p), now, rules.FixedWindow(p).Fresh, rules.FixedWindow(p).Take, rules.FixedWindow(p).Peek, writesIfCost)
		drive(rt, c, now, w/3+1, limit)
	})
}

func TestFixedWindowLayout(t *testing.T) {
	for _, c := range []struct {
		limit   int64
		w       time.Duration
		horizon int64
	}{
		{100, time.Second, math.MaxInt64},                          // k = 55: indices never wrap
		{math.MaxUint32, time.Millisecond, 1 << 28},                // k = 30: 2^28 windows of 1 ms
		{math.MaxUint32, time.Second, 1000 << 28},                  // k = 30
		{math.MaxUint32, policy.MaxWindow, 1 << 60},                // indices reach 2^30 = 2^k by 2^62 ms
		{1<<21 - 1, time.Millisecond, 1 << 39},                     // b = 21, k = 41
		{1<<21 - 1, 1 << 22 * time.Millisecond, math.MaxInt64},     // indices stay below 2^40 = 2^(k-1)
		{1<<21 - 1, (1<<22 - 1) * time.Millisecond, 1<<61 - 1<<39}, // 2^39 windows of 2^22 - 1 ms
	} {
		codec := NewFixedWindow(policy.FixedWindow{Limit: c.limit, Window: c.w})
		require.Equal(t, 1, codec.Words())
		require.Equal(t, c.horizon, codec.Horizon(), "limit %d window %v", c.limit, c.w)
	}
}

// TestFixedWindowReadsARacingWriterAhead: a writer whose clock read a moment later moved the cell
// into the next window; a reader with the earlier time counts there, not in a window of its own.
func TestFixedWindowReadsARacingWriterAhead(t *testing.T) {
	codec := NewFixedWindow(policy.FixedWindow{Limit: 10, Window: time.Second})
	cell := aligned()
	const edge = int64(1_764_000_001_000)
	f, _ := codec.Fresh(edge)
	Store(cell, 1, f, 0)
	r, _ := codec.Take(cell, edge, 4)
	require.True(t, r.Allowed)
	r, _ = codec.Take(cell, edge-1, 6)
	require.True(t, r.Allowed)
	require.Equal(t, edge+1000, r.ResetAtMs, "counted in the writer's window")
	r, _ = codec.Take(cell, edge-1, 1)
	require.False(t, r.Allowed)
	require.Equal(t, int64(1001), r.RetryAfterMs)
	ok, _ := codec.Admit(cell, edge-1, 1)
	require.False(t, ok)
	w, _ := Load(cell, 1)
	require.False(t, codec.Dead(w, 0, edge, edge+999))
	require.True(t, codec.Dead(w, 0, edge, edge+1000))
}

// TestFixedWindowHorizon: with k = 30 bits of index and 1 ms windows, the cell reads a state
// correctly up to 2^29 - 1 windows either side of now; Dead reads it relative to the sweep.
func TestFixedWindowHorizon(t *testing.T) {
	codec := NewFixedWindow(policy.FixedWindow{Limit: math.MaxUint32, Window: time.Millisecond})
	cell := aligned()
	f, _ := codec.Fresh(epoch)
	Store(cell, 1, f, 0)
	codec.Take(cell, epoch, 7)
	_, pr, _ := codec.Peek(cell, epoch)
	require.Equal(t, int64(7), pr.Count)
	_, pr, _ = codec.Peek(cell, epoch+1<<29-1)
	require.Equal(t, int64(0), pr.Count, "an earlier window")
	_, pr, _ = codec.Peek(cell, epoch-(1<<29))
	require.Equal(t, int64(7), pr.Count, "a writer up to 2^29 windows ahead")
	w, _ := Load(cell, 1)
	// Dead reads the index in [ref's - 2^28, ref's + 3*2^28).
	for _, ref := range []int64{epoch - 3<<28 + 1, epoch, epoch + 1<<28} {
		require.False(t, codec.Dead(w, 0, ref, epoch), "ref %d", ref-epoch)
		require.True(t, codec.Dead(w, 0, ref, epoch+1), "ref %d", ref-epoch)
	}
	zero, _ := codec.Fresh(epoch + 5)
	require.True(t, codec.Dead(zero, 0, epoch, epoch), "nothing counted: a new key's state")
	n, _, changed := codec.Normalize(zero, 0, epoch+5)
	require.False(t, changed)
	require.Equal(t, zero, n)
	age, ok := codec.Stale(w, 0, epoch+3, 0)
	require.Equal(t, int64(3), age)
	require.True(t, ok)
}
