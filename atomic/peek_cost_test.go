package atomic

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

// peekCodecs are one codec of every kind: each policy, with a one-word and a two-word cell where
// it has both.
func peekCodecs() map[string]Codec {
	return map[string]Codec{
		"sliding-counter/word": NewSlidingCounter(policy.SlidingCounter{Limit: 10, Window: time.Second}),
		"sliding-counter/pair": NewSlidingCounter(policy.SlidingCounter{Limit: 1 << 30, Window: time.Second}),
		"fixed-window":         NewFixedWindow(policy.FixedWindow{Limit: 10, Window: time.Second}),
		"sliding-log":          NewSlidingLog(policy.SlidingLog{Limit: 10, Window: time.Second}),
		"token-bucket/word":    NewTokenBucket(policy.TokenBucket{Rate: 3, Burst: 10}),
		"token-bucket/pair":    NewTokenBucket(policy.TokenBucket{Rate: 3, Burst: 1 << 30}),
		"gcra":                 NewGCRA(policy.GCRA{Rate: 3, Burst: 10}),
		"leaky-bucket/word":    NewLeakyBucket(policy.LeakyBucket{Rate: 3, Capacity: 10}),
		"leaky-bucket/pair":    NewLeakyBucket(policy.LeakyBucket{Rate: 3, Capacity: 1 << 30}),
		"dual-bucket":          NewDualBucket(policy.DualBucket{RequestsPerMin: 5, TokensPerMin: 10}),
	}
}

// PeekCost, on every codec, answers what Take then answers on a twin cell that has seen the same
// requests, changes nothing (the cell's words and a following Peek are the same), and keeps
// Peek's Remaining and ResetAt; PeekFreshCost does the same for a new key. Every codec that keeps
// state outside its cell is a CostPeeker.
func TestPeekCostIsWhatTakeWouldGet(t *testing.T) {
	const t0 = int64(1_700_000_000_000)
	for name, cd := range peekCodecs() {
		t.Run(name, func(t *testing.T) {
			if _, outside := cd.(Evictor); outside {
				require.Implements(t, (*CostPeeker)(nil), cd)
			}
			a, b := alignedCell(), alignedCell() // the peeked cell and its twin
			w0, w1 := cd.Fresh(t0)
			Store(a, cd.Words(), w0, w1)
			w0, w1 = cd.Fresh(t0)
			Store(b, cd.Words(), w0, w1)
			costs := []int64{0, 1, 2, 4, 10, 11}
			now := t0
			for step := range 60 {
				cost := costs[step%len(costs)]
				what := fmt.Sprintf("step %d, cost %d at %d", step, cost, now-t0)
				if step == 0 {
					fresh := PeekFreshCost(cd, now, cost)
					took, _ := cd.Take(b, now, cost)
					require.Equal(t, took.Allowed, fresh.Allowed, what)
					require.Equal(t, took.RetryAfterMs, fresh.RetryAfterMs, what)
					a0, _ := cd.Take(a, now, cost)
					require.Equal(t, took, a0, what)
					continue
				}
				before0, before1 := Load(a, cd.Words())
				peeked, _, pst := cd.Peek(a, now)
				require.Equal(t, OK, pst, what)
				r, st := PeekCost(cd, a, now, cost)
				require.Equal(t, OK, st, what)
				after0, after1 := Load(a, cd.Words())
				require.Equal(t, [2]uint64{before0, before1}, [2]uint64{after0, after1}, "%s: PeekCost wrote the cell", what)
				again, _, _ := cd.Peek(a, now)
				require.Equal(t, peeked, again, "%s: PeekCost changed the state", what)
				require.Equal(t, peeked.Remaining, r.Remaining, what)
				require.Equal(t, peeked.ResetAtMs, r.ResetAtMs, what)
				took, _ := cd.Take(b, now, cost)
				require.Equal(t, took.Allowed, r.Allowed, what)
				require.Equal(t, took.RetryAfterMs, r.RetryAfterMs, what)
				cd.Take(a, now, cost) // keep the twins alike
				now += int64(step%4) * 97
			}
		})
	}
}

// A codec that keeps state outside its cell but is no CostPeeker cannot be peeked on a copy of its
// cell: PeekCost and PeekFreshCost panic rather than change the key.
func TestPeekCostRefusesAnEvictorWithoutIt(t *testing.T) {
	var cd evictorOnly
	require.PanicsWithValue(t, "atomic: PeekCost: atomic.evictorOnly keeps state outside its cell and is not a CostPeeker", func() {
		PeekCost(cd, alignedCell(), 0, 1)
	})
	require.Panics(t, func() { PeekFreshCost(cd, 0, 1) })
}

// evictorOnly is a token bucket's codec posing as one whose state is outside its cell.
type evictorOnly struct{ Codec }

func (evictorOnly) Evict(*uint64, int64, int64) bool { return false }
func (evictorOnly) Release(uint64, uint64)           {}
