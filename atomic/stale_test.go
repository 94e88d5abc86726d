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
