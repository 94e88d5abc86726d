package clock

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestManual(t *testing.T) {
	c := NewManual(1000)
	require.True(t, c.Manual())
	require.Equal(t, int64(1000), c.Now())
	require.Equal(t, int64(1250), c.Advance(250*time.Millisecond+999*time.Microsecond))
	c.Set(5)
	require.Equal(t, int64(5), c.Now())
	c.Stop() // a no-op
}

func TestCoarseFollowsWallClockAndStops(t *testing.T) {
	before := time.Now().UnixMilli()
	c := NewCoarse(time.Millisecond)
	require.False(t, c.Manual())
	require.GreaterOrEqual(t, c.Now(), before)
	first := c.Now()
	require.Eventually(t, func() bool { return c.Now() > first }, 5*time.Second, time.Millisecond,
		"a coarse clock advances")
	c.Stop()
	c.Stop() // idempotent
	require.LessOrEqual(t, c.Now(), time.Now().UnixMilli())
	// Stopped, it keeps its last reading: neither its goroutine nor Refresh moves it.
	last := c.Now()
	time.Sleep(5 * time.Millisecond)
	require.Equal(t, last, c.Refresh(), "Refresh moved a stopped clock")
	require.Equal(t, last, c.Now())
	require.Panics(t, func() { c.Set(1) })
	require.Panics(t, func() { c.Advance(time.Second) })
}

func TestTickNeverRunsBackwards(t *testing.T) {
	c := NewManual(0)
	c.manual = false // exercise the coarse clock's update rule without its goroutine
	c.tick(100)
	c.tick(50) // the wall clock stepped back
	require.Equal(t, int64(100), c.Now())
	c.tick(101)
	require.Equal(t, int64(101), c.Now())
}

func TestSharedClockIsReferenceCounted(t *testing.T) {
	a := Acquire()
	b := Acquire()
	require.Same(t, a, b)
	Release(a)
	Release(NewManual(0)) // not the shared clock: ignored
	require.NotPanics(t, func() { b.Now() })
	Release(b)
	goleak.VerifyNone(t) // the last Release stopped the goroutine
	c := Acquire()
	require.NotSame(t, a, c, "a new shared clock after the last release")
	Release(c)
}

// TestManualClampsToRange: no manual clock reads outside [0, MaxMs], whatever it is given; the
// engine's cells could not store a later time (its flag bits sit above bit 61).
func TestManualClampsToRange(t *testing.T) {
	require.Equal(t, int64(MaxMs), NewManual(1<<62).Now())
	require.Equal(t, int64(MaxMs), NewManual(math.MaxInt64).Now())
	require.Equal(t, int64(0), NewManual(-5).Now())
	c := NewManual(MaxMs - 2)
	require.Equal(t, int64(MaxMs), c.Advance(time.Hour))
	require.Equal(t, int64(MaxMs), c.Advance(time.Duration(math.MaxInt64)))
	require.Equal(t, int64(MaxMs-1000), c.Advance(-time.Second))
	c.Set(1 << 62)
	require.Equal(t, int64(MaxMs), c.Now())
	c.Set(math.MinInt64)
	require.Equal(t, int64(0), c.Now())
	require.Equal(t, int64(0), c.Advance(-time.Hour))
	require.Equal(t, int64(0), c.Advance(time.Duration(math.MinInt64)))
	require.Equal(t, int64(1), c.Advance(time.Millisecond))
}

// TestRefresh: a reader's Refresh brings a coarse clock whose goroutine has not ticked up to the
// wall clock, never back, and leaves a manual clock alone.
func TestRefresh(t *testing.T) {
	c := NewCoarse(time.Hour) // its goroutine will not tick during the test
	defer c.Stop()
	stale := c.Now()
	time.Sleep(5 * time.Millisecond)
	before := time.Now().UnixMilli()
	require.GreaterOrEqual(t, c.Refresh(), before)
	require.Greater(t, c.Now(), stale)
	c.tick(c.Now() + 1000) // a reading ahead of the wall clock stays
	require.Equal(t, c.Now(), c.Refresh())

	m := NewManual(42)
	require.Equal(t, int64(42), m.Refresh())
}

// TestDueRate: Due reports true about once in RefreshEvery calls.
func TestDueRate(t *testing.T) {
	const calls = 1000 * RefreshEvery
	n := 0
	for range calls {
		if Due() {
			n++
		}
	}
	require.InDelta(t, 1000, n, 200, "%d of %d", n, calls) // 6 standard deviations
}

// TestDueForRate: DueFor(n) reports true about n times in RefreshEvery calls, never for n <= 0,
// and always from RefreshEvery on.
func TestDueForRate(t *testing.T) {
	const calls = 1000 * RefreshEvery / 16
	n := 0
	for range calls {
		if DueFor(16) {
			n++
		}
	}
	require.InDelta(t, 1000, n, 200, "%d of %d", n, calls) // 6.5 standard deviations
	for range 10 * RefreshEvery {
		require.False(t, DueFor(0))
		require.False(t, DueFor(-5))
		require.True(t, DueFor(RefreshEvery))
		require.True(t, DueFor(math.MaxInt))
		if big := int64(1) << 32; math.MaxInt > math.MaxInt32 {
			// Past 32 bits too: the count was cut to its low 32 bits, 0 for 2^32.
			require.True(t, DueFor(int(big)))
			require.True(t, DueFor(int(big+1)))
		}
	}
}

// TestZeroClock: the zero Clock reads 0 until refreshed, and Stop on it returns.
func TestZeroClock(t *testing.T) {
	var c Clock
	require.Equal(t, int64(0), c.Now())
	c.Stop()
	c.Stop()
	before := time.Now().UnixMilli()
	require.GreaterOrEqual(t, c.Refresh(), before)
	require.False(t, c.Manual())
}

// asleepBy waits until c's goroutine sleeps (a second or so with no Refresh) and returns the
// reading it slept at.
func asleepBy(t *testing.T, c *Clock) int64 {
	t.Helper()
	require.Eventually(t, func() bool { return c.now.Load() < 0 }, 20*time.Second, 5*time.Millisecond,
		"the goroutine of a clock nobody refreshes sleeps")
	return c.now.Load() & math.MaxInt64
}

// A coarse clock's goroutine sleeps once nobody has refreshed or woken it for idleTicks ticks;
// nothing ticks while it sleeps; the next readings, however many at once, get the wall clock's
// time, never the stale reading; and the goroutine ticks again.
func TestCoarseSleepsWhenIdleAndWakesOnRead(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	defer c.Stop()
	slept := asleepBy(t, c)
	time.Sleep(20 * time.Millisecond)
	require.Negative(t, c.now.Load(), "the reading moved while its goroutine slept")

	before := time.Now().UnixMilli()
	got := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = c.Now() })
	}
	wg.Wait()
	after := time.Now().UnixMilli()
	for _, g := range got {
		require.GreaterOrEqual(t, g, before, "a reading after the sleep is older than the wall clock")
		require.LessOrEqual(t, g, after)
	}
	require.Greater(t, before, slept+10, "the test slept 20ms")
	woken := c.Now()
	require.Eventually(t, func() bool { v := c.now.Load(); return v >= 0 && v > woken }, 5*time.Second, time.Millisecond,
		"the woken goroutine ticks again")
}

// Refresh, which a process that decides often calls many times a second (see Due), keeps the
// goroutine awake; and a Refresh of a sleeping clock wakes it, as Now does.
func TestRefreshKeepsTheClockAwake(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	defer c.Stop()
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		c.Refresh()
		require.GreaterOrEqual(t, c.now.Load(), int64(0), "the goroutine slept while the clock was refreshed")
	}
	asleepBy(t, c)
	before := time.Now().UnixMilli()
	require.GreaterOrEqual(t, c.Refresh(), before, "Refresh of a sleeping clock")
	require.GreaterOrEqual(t, c.now.Load(), int64(0))
}

// Stopped while its goroutine sleeps, a clock keeps the reading it slept at, unmarked.
func TestStopWhileAsleep(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	slept := asleepBy(t, c)
	c.Stop()
	require.Equal(t, slept, c.now.Load())
	time.Sleep(5 * time.Millisecond)
	require.Equal(t, slept, c.Now())
	require.Equal(t, slept, c.Refresh())
}

// Background on a sleeping clock gives the wall clock's time and leaves the goroutine asleep, with
// the sleeping reading moved forward, so that the wake after it never reads earlier.
func TestBackgroundLeavesTheClockAsleep(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	defer c.Stop()
	slept := asleepBy(t, c)
	time.Sleep(20 * time.Millisecond)
	before := time.Now().UnixMilli()
	bg := c.Background()
	require.GreaterOrEqual(t, bg, before)
	require.Greater(t, bg, slept)
	require.Negative(t, c.now.Load(), "Background woke the clock")
	require.Equal(t, bg, c.now.Load()&math.MaxInt64, "the sleeping reading moved to Background's")
	require.GreaterOrEqual(t, c.Now(), bg, "the wake read earlier than Background")
	require.GreaterOrEqual(t, c.Background(), bg, "on an awake clock Background is Now")
}
