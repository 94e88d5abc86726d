package atomic

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

// TestSlidingCounterStale: a key is evictable while its estimate is below half of the limit it is
// judged against, which the caller may lower to the key's own.
func TestSlidingCounterStale(t *testing.T) {
	for _, codec := range []Codec{
		NewSlidingCounter(policy.SlidingCounter{Limit: 10, Window: time.Second}),
		NewSlidingCounterUpTo(policy.SlidingCounter{Limit: 10, Window: time.Second}, 1<<30), // two words
	} {
		cell := aligned()
		f0, f1 := codec.Fresh(epoch)
		Store(cell, codec.Words(), f0, f1)
		codec.Take(cell, epoch, 4)
		w0, w1 := Load(cell, codec.Words())
		_, ok := codec.Stale(w0, w1, epoch, 0)
		require.True(t, ok, "4 of 10")
		_, ok = codec.Stale(w0, w1, epoch, 8)
		require.False(t, ok, "4 of its own 8 is half")
		_, ok = codec.Stale(w0, w1, epoch, 9)
		require.True(t, ok, "4 of 9")
		codec.Take(cell, epoch, 1)
		w0, w1 = Load(cell, codec.Words())
		_, ok = codec.Stale(w0, w1, epoch, 0)
		require.False(t, ok, "5 of 10 is half")
		// Half a window on, 5 previous carry 2 (floor of 2.5): evictable again.
		age, ok := codec.Stale(w0, w1, epoch+1500, 0)
		require.True(t, ok)
		require.Equal(t, int64(1500), age, "since the start of the window it last counted in")
	}
}

// TestGCRAStaleInWholePermits: GCRA judges what a key holds in whole permits, as the token bucket
// (which decides identically) does: a key that took half its burst is not evictable while less
// than one permit has come back, though its exact lag is already below half.
func TestGCRAStaleInWholePermits(t *testing.T) {
	gcra := NewGCRA(policy.GCRA{Rate: 1, Burst: 10})
	tb := NewTokenBucket(policy.TokenBucket{Rate: 1, Burst: 10})
	gc, tc := aligned(), aligned()
	for _, c := range []struct {
		codec Codec
		cell  *uint64
	}{{gcra, gc}, {tb, tc}} {
		f0, f1 := c.codec.Fresh(epoch)
		Store(c.cell, c.codec.Words(), f0, f1)
		c.codec.Take(c.cell, epoch, 5)
	}
	// One permit a second: 5 held until 1000 ms on, 4 (evictable) from then.
	for _, c := range []struct {
		after     int64
		evictable bool
	}{{0, false}, {1, false}, {999, false}, {1000, true}, {4000, true}} {
		for name, codec := range map[string]Codec{"gcra": gcra, "token-bucket": tb} {
			cell := gc
			if name == "token-bucket" {
				cell = tc
			}
			w0, w1 := Load(cell, codec.Words())
			_, ok := codec.Stale(w0, w1, epoch+c.after, 0)
			require.Equal(t, c.evictable, ok, "%s, %d ms after taking 5 of 10", name, c.after)
		}
	}
}
