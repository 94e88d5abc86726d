package atomic

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

// TestConstructorsRefuseInvalidPolicies: a codec of an invalid policy panics at once with the
// policy's own validation error, naming the field, where it divided by zero later (a zero
// window or rate) or built cells that could not hold its counts (a negative limit).
func TestConstructorsRefuseInvalidPolicies(t *testing.T) {
	for _, c := range []struct {
		p   policy.Policy
		new func() Codec
	}{
		{policy.SlidingCounter{}, func() Codec { return NewSlidingCounter(policy.SlidingCounter{}) }},
		{policy.SlidingCounter{Limit: -1, Window: time.Second}, func() Codec { return NewSlidingCounter(policy.SlidingCounter{Limit: -1, Window: time.Second}) }},
		{policy.FixedWindow{}, func() Codec { return NewFixedWindow(policy.FixedWindow{}) }},
		{policy.TokenBucket{}, func() Codec { return NewTokenBucket(policy.TokenBucket{}) }},
		{policy.GCRA{}, func() Codec { return NewGCRA(policy.GCRA{}) }},
		{policy.LeakyBucket{}, func() Codec { return NewLeakyBucket(policy.LeakyBucket{}) }},
		{policy.DualBucket{}, func() Codec { return NewDualBucket(policy.DualBucket{}) }},
		{policy.SlidingLog{}, func() Codec { return NewSlidingLog(policy.SlidingLog{}) }},
	} {
		err := c.p.Validate()
		require.Error(t, err, "%T%+v", c.p, c.p)
		require.PanicsWithValue(t, "atomic: "+err.Error(), func() { c.new() }, "%T%+v", c.p, c.p)
	}
	p := policy.SlidingCounter{Limit: 10, Window: time.Second}
	require.PanicsWithValue(t, "atomic: NewSlidingCounterUpTo: maxLimit 4294967296 is above policy.MaxLimit, 4294967295", func() { NewSlidingCounterUpTo(p, 1<<32) })
	require.NotPanics(t, func() { NewSlidingCounterUpTo(p, 9) }, "below the policy's limit: raised to it")
}
