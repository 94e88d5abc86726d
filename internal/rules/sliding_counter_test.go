package rules

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

// TestSlidingCounterSteps walks one key through the contract's rules with expectations worked out
// by hand (the arithmetic is in the comments).
func TestSlidingCounterSteps(t *testing.T) {
	p := SlidingCounter{Limit: 5, Window: time.Second}
	s := p.Fresh(10_000)
	type step struct {
		now, cost  int64
		allowed    bool
		remaining  int64
		retryAfter int64
		estimate   int64 // after the step
	}
	for i, st := range []step{
		{10_000, 5, true, 0, 0, 5},    // 0+0+5 <= 5: ties admit
		{10_500, 1, false, 0, 501, 5}, // current alone is full: edge (11,000) - 10,500 + 1
		{10_999, 0, true, 0, 0, 5},    // cost 0 always admitted, counts nothing
		{11_001, 1, true, 0, 0, 5},    // carried floor(5*999/1000) = floor(4.995) = 4; 4+0+1 <= 5
		{11_001, 1, false, 0, 200, 5}, // need = 5-1-1 = 3, excess = 5-3-1 = 1, target = floor(1000*1/5)+1 = 201, elapsed 1: 200
		{11_201, 1, true, 0, 0, 5},    // carried floor(5*799/1000) = 3; 3+1+1 <= 5
		{11_201, 6, false, 0, 0, 5},   // above the limit: refused, no retry
		{13_000, 5, true, 0, 0, 5},    // a gap of two windows clears both counts
		{14_000, 3, false, 0, 401, 5}, // at the edge: carried 5, need = 5-0-3 = 2, excess = 5-2-1 = 2, target = floor(1000*2/5)+1 = 401, elapsed 0
		{14_999, 3, true, 2, 0, 3},    // carried floor(5*1/1000) = 0; 0+0+3 <= 5, remaining 5-3
	} {
		r := p.Take(&s, st.now, st.cost)
		require.Equal(t, st.allowed, r.Allowed, "step %d", i)
		require.Equal(t, st.remaining, r.Remaining, "step %d", i)
		require.Equal(t, st.retryAfter, r.RetryAfterMs, "step %d", i)
		_, pr := p.Peek(s, st.now)
		require.Equal(t, st.estimate, pr.Estimate, "step %d", i)
		rule := p.Compile()
		require.Equal(t, st.estimate, rule.Estimate(s, st.now), "step %d: Estimate", i)
		// Half a window later the previous count weighs half: the estimate a judge of staleness sees.
		later := st.now + 500
		_, pr = p.Peek(s, later)
		require.Equal(t, pr.Estimate, rule.Estimate(s, later), "step %d: Estimate at %d", i, later)
	}
}

func TestSlidingCounterRetryAfterAcrossTheEdge(t *testing.T) {
	// A refused cost of 4 with current = 3 of limit 5: need = 5-3-4 < 0, so wait to the edge,
	// where 3 becomes the previous count; need' = 5-4 = 1, excess = 3-1-1 = 1,
	// target = floor(1000*1/3)+1 = 334: edge + 334 ms.
	p := SlidingCounter{Limit: 5, Window: time.Second}
	s := p.Fresh(0)
	p.Take(&s, 100, 3)
	r := p.Take(&s, 100, 4)
	require.False(t, r.Allowed)
	require.Equal(t, int64(900+334), r.RetryAfterMs)
	require.False(t, p.Take(&s, 1333, 4).Allowed, "one ms early: floor(3*667/1000) = 2, 2+4 > 5")
	require.True(t, p.Take(&s, 1334, 4).Allowed, "floor(3*666/1000) = 1, 1+4 <= 5")
}

func TestSlidingCounterOverflowExtremes(t *testing.T) {
	p := SlidingCounter{Limit: policy.MaxLimit, Window: policy.MaxWindow}
	require.NoError(t, policy.SlidingCounter(p).Validate())
	w := int64(1 << 32)
	base := int64(1<<42) / w * w
	s := p.Fresh(base)
	require.True(t, p.Take(&s, base+w-1, policy.MaxLimit).Allowed)
	// (2^32-1) * (2^32-1) is within uint64; floor((2^32-1)*(2^32-1)/2^32) = 2^32-2.
	_, pr := p.Peek(s, base+w+1)
	require.Equal(t, int64(math.MaxUint32-1), pr.Estimate)
}

func TestDead(t *testing.T) {
	p := SlidingCounter{Limit: 5, Window: time.Second}
	s := p.Fresh(1000)
	require.True(t, p.Dead(s, 1000), "zero counts are a new key's state")
	p.Take(&s, 1500, 1)
	require.False(t, p.Dead(s, 2999), "the count still carries into window 2")
	require.True(t, p.Dead(s, 3000), "two whole windows later nothing carries")
}

// TestRetryAfterForAStateAhead: a state a racing writer moved into a later window than now's is
// read as that window's first millisecond, and the wait counts from now.
func TestRetryAfterForAStateAhead(t *testing.T) {
	p := SlidingCounter{Limit: 1, Window: time.Millisecond}
	s := SlidingCounterState{Window: 125, Previous: 1}
	r := p.Take(&s, 121, 1)
	require.False(t, r.Allowed)
	// At 125 the previous count is undecayed (W = 1 ms carries it whole); at 126 it is gone.
	require.Equal(t, int64(5), r.RetryAfterMs)
	require.True(t, p.Take(&s, 121+r.RetryAfterMs, 1).Allowed)
}
