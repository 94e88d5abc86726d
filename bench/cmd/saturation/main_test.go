package main

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

func TestValidate(t *testing.T) {
	require.NoError(t, validate(1000, 10*time.Millisecond, 3*time.Second, 1, 0.97))
	for _, c := range []struct {
		limit    int64
		window   time.Duration
		duration time.Duration
		procs    int
		target   float64
		want     string
	}{
		{0, time.Second, time.Minute, 1, 0.9, "-limit 0"},
		{1, 1500 * time.Microsecond, time.Minute, 1, 0.9, "-window 1.5ms"},
		{1, time.Second, time.Second, 1, 0.9, "-duration 1s"},
		{1, time.Second, time.Minute, 0, 0.9, "-procs 0"},
		{1, time.Second, time.Minute, 100000, 0.9, "-procs 100000: must be in [1, 1024]"},
		{1, time.Second, time.Minute, 1, 1.5, "-target 1.5"},
		{1, time.Second, time.Minute, 1, math.NaN(), "-target NaN"},
	} {
		require.ErrorContains(t, validate(c.limit, c.window, c.duration, c.procs, c.target), c.want)
	}
}

// TestPerfect: on an exact clock the fixed window admits its limit in every window, and the
// sliding counter with a 10ms window settles at limit/(1 + 1/10) per window (the package comment).
func TestPerfect(t *testing.T) {
	fw, err := policyFor("fixed-window", 1000, 10*time.Millisecond)
	require.NoError(t, err)
	got, err := perfect(fw, 1001, 1000)
	require.NoError(t, err)
	require.InDelta(t, 100*1000, float64(got), 1000, "100 windows, give or take the one the run starts in")
	sc, err := policyFor("sliding-counter", 1000, 10*time.Millisecond)
	require.NoError(t, err)
	got, err = perfect(sc, 1001, 10_000)
	require.NoError(t, err)
	require.InDelta(t, 1000*1000/1.1, float64(got), 2000, "the first window, with nothing carried, admits more")
	_, err = policyFor("gcra", 1, time.Second)
	require.ErrorContains(t, err, `-policy "gcra"`)
}

// TestRunCounts: a short run under a limit no loop reaches admits every call it makes.
func TestRunCounts(t *testing.T) {
	r, err := run(policy.SlidingCounter{Limit: 1 << 30, Window: time.Second}, 20*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, r.calls)
	require.Equal(t, r.calls, r.admitted)
	require.Positive(t, r.samples)
}
