package shard

import (
	"sync"
	satomic "sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/policy"
)

const now = int64(1_764_000_000_000)

func newShard(t testing.TB, limit int64, evict bool) (*Shard, *Config) {
	t.Helper()
	cfg := &Config{
		Codec: atomic.NewSlidingCounter(policy.SlidingCounter{Limit: limit, Window: time.Second}),
		Evict: evict,
		Keys:  new(satomic.Int64),
	}
	s := new(Shard)
	s.Init(cfg, now)
	return s, cfg
}

func TestAcquireFindAndGrow(t *testing.T) {
	s, cfg := newShard(t, 10, false)
	for h := uint64(1); h <= 10_000; h++ {
		c, created, _ := s.Acquire(cfg, h*0x9e3779b97f4a7c15|1, now)
		require.True(t, created)
		require.NotNil(t, c)
	}
	_, created, _ := s.Acquire(cfg, 1*0x9e3779b97f4a7c15|1, now)
	require.False(t, created, "a tracked key is not created twice")
	require.Equal(t, int64(10_000), s.Live())
	require.Equal(t, int64(10_000), cfg.Keys.Load())
	t0 := s.Table()
	for h := uint64(1); h <= 10_000; h++ {
		require.NotNil(t, t0.Find(h*0x9e3779b97f4a7c15|1), "key %d", h)
	}
	require.Nil(t, t0.Find(12345))
	// The load stays between the target and the maximum.
	used := float64(10_000) / float64(t0.Slots())
	require.GreaterOrEqual(t, used, 0.5)
	require.LessOrEqual(t, used, 7.0/8)
}

// TestRebuildKeepsConcurrentUpdates: updates racing with rebuilds either land before a cell is
// copied or retry in the new table; none is lost.
func TestRebuildKeepsConcurrentUpdates(t *testing.T) {
	s, cfg := newShard(t, 1<<20, false)
	const hot = uint64(0xabcdef)
	s.Acquire(cfg, hot, now)
	var admitted satomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20_000 {
				for {
					c := s.Table().Find(hot)
					r, st := cfg.Codec.Take(c, now, 1)
					if st == atomic.OK {
						if r.Allowed {
							admitted.Add(1)
						}
						break
					}
					s.Wait()
				}
			}
		}()
	}
	for h := uint64(1); h <= 20_000; h++ { // grow the table under the updaters, many times over
		s.Acquire(cfg, h*0x9e3779b97f4a7c15, now)
	}
	wg.Wait()
	_, pr, st := cfg.Codec.Peek(s.Table().Find(hot), now)
	require.Equal(t, atomic.OK, st)
	require.Equal(t, admitted.Load(), pr.Estimate)
	require.Equal(t, int64(80_000), admitted.Load())
}

// TestTouchStaysInTheTable: Touch near the end of a table reads no word past it, in both slot
// sizes (under -race, checkptr faults a pointer moved outside its allocation). The home of
// ^uint64(0) is the last slot.
func TestTouchStaysInTheTable(t *testing.T) {
	for _, words := range []int{1, 2} {
		tb := newTable(minSlots, words, 0)
		for _, h := range []uint64{1, 1 << 63, ^uint64(0), ^uint64(0) - 1<<60} {
			tb.Touch(h)
		}
		require.Equal(t, tb.n-1, tb.home(^uint64(0)))
		// The slot a line past the last slot's would be past the table's words.
		require.GreaterOrEqual(t, tb.home(^uint64(0))+uint64(lineSize)>>tb.slotShift, tb.n)
	}
}
