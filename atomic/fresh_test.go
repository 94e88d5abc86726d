package atomic

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

// TestFreshAdmit: a codec's FreshAdmit leaves the state, and makes the decision, that Admit makes
// on a cell holding Fresh at the same time, for costs around the limit and times around window
// edges. Both sliding-counter cells must implement it, so that the default policy's inserts use it.
func TestFreshAdmit(t *testing.T) {
	codecs := []Codec{
		NewSlidingCounter(policy.SlidingCounter{Limit: 1, Window: time.Second}),
		NewSlidingCounter(policy.SlidingCounter{Limit: 100, Window: 1500 * time.Millisecond}),
		NewSlidingCounter(policy.SlidingCounter{Limit: 1<<21 - 1, Window: time.Hour}),
		NewSlidingCounter(policy.SlidingCounter{Limit: 1 << 21, Window: time.Second}), // two words
		NewSlidingCounter(policy.SlidingCounter{Limit: math.MaxUint32, Window: time.Minute}),
		NewSlidingCounterUpTo(policy.SlidingCounter{Limit: 10, Window: time.Second}, 1<<30),
	}
	times := []int64{0, 1, 999, 1000, 1001, epoch, epoch + 999, epoch + 1000, 1 << 50}
	for _, codec := range codecs {
		fa, ok := codec.(FreshAdmitter)
		require.True(t, ok, "%T is not a FreshAdmitter", codec)
		var limit int64
		switch c := codec.(type) {
		case *slidingCounterWord:
			limit = c.p.Limit()
		case *slidingCounterPair:
			limit = c.p.Limit()
		}
		for _, now := range times {
			for _, cost := range []int64{0, 1, 2, limit - 1, limit, limit + 1, math.MaxInt64} {
				cell := aligned()
				f0, f1 := codec.Fresh(now)
				Store(cell, codec.Words(), f0, f1)
				want, st := codec.Admit(cell, now, cost)
				require.Equal(t, OK, st)
				w0, w1 := Load(cell, codec.Words())
				g0, g1, got := fa.FreshAdmit(now, cost)
				require.Equal(t, want, got, "%T limit %d: decision at %d for cost %d", codec, limit, now, cost)
				require.Equal(t, [2]uint64{w0, w1}, [2]uint64{g0, g1}, "%T limit %d: state at %d for cost %d", codec, limit, now, cost)
			}
		}
	}
}
