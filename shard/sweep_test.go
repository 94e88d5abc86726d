package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/policy"
)

// TestSweepRangeEvictsExactlyTheDead: bounded reclaims that go once round the table, and sweeps
// of random ranges, evict every key dead at their time and no live one, and count what they
// evict, with the sliding counter's live pattern and with the fixed window, which has none.
func TestSweepRangeEvictsExactlyTheDead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reclaim bool
		pattern bool
	}{{"reclaim", true, true}, {"reclaim-no-pattern", true, false}, {"ranges", false, true}, {"ranges-no-pattern", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, cfg := newShard(t, 10, true)
			cfg.ExpectedKeys = 4000 // no rebuild, which would drop the dead keys itself
			if !tc.pattern {
				cfg.Codec = atomic.NewFixedWindow(policy.FixedWindow{Limit: 10, Window: time.Second})
			}
			s.Init(cfg, now)
			tb := s.Table()
			r := rand.New(rand.NewPCG(9, 10))
			add := func(at int64) uint64 { return addCounted(t, s, cfg, r, at) }
			// Dead and live keys interleaved along the table, so that suspects follow live keys
			// and empty slots in every order.
			var dead, live []uint64
			for range 2000 {
				dead = append(dead, add(now))
			}
			later := now + 5_000 // five one-second windows on: the keys above are dead
			for range 2000 {
				live = append(live, add(later))
			}
			at := later
			require.Equal(t, tc.pattern, s.livePattern(cfg, at).on)
			require.Same(t, tb, s.Table(), "the table was rebuilt")
			evicted := 0
			if tc.reclaim {
				for range (tb.Slots() + 63) / 64 {
					evicted += s.Reclaim(cfg, at, 64)
				}
			} else {
				for from := uint64(0); from < tb.Slots(); {
					to := from + r.Uint64N(100)
					evicted += s.SweepRange(cfg, tb, from, to, at)
					from = to
				}
			}
			require.Equal(t, len(dead), evicted)
			require.Equal(t, int64(len(live)), s.Live())
			for _, h := range dead {
				w0, _ := atomic.Load(tb.Find(h), 1)
				require.NotZero(t, w0&atomic.Dead, "a dead key was left")
			}
			for _, h := range live {
				w0, _ := atomic.Load(tb.Find(h), 1)
				require.Zero(t, w0&atomic.Flags, "a live key was marked")
			}
		})
	}
}

// TestNextSuspectLocked checks nextSuspectLocked against a slot-by-slot reading of the same rule,
// on tables of both cell widths with empty slots and cells of every pattern.
func TestNextSuspectLocked(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, words := range []int{1, 2} {
		tb := newTable(1000, words, 0)
		for i := range tb.n {
			if r.IntN(5) > 0 { // a fifth empty, as at the tables' load
				tb.put(i, r.Uint64()|1, words, r.Uint64N(4), 0)
			}
		}
		for range 2000 {
			mask, a, b := uint64(3), r.Uint64N(4), r.Uint64N(4)
			if r.IntN(4) == 0 {
				mask, a, b = 0, 1, 1 // SweepRange's "no pattern"
			}
			from := r.Uint64N(tb.n + 1)
			to := from + r.Uint64N(tb.n+1-from)
			want := to
			for i := from; i < to; i++ {
				k, c := tb.Cell(i)
				if m := *c & mask; k != 0 && m != a && m != b {
					want = i
					break
				}
			}
			require.Equal(t, want, tb.nextSuspectLocked(from, to, mask, a, b), "words %d, [%d, %d), pattern %d/%d/%d", words, from, to, mask, a, b)
		}
	}
}

// A reclaim's budget is at most the table: one past the slots left from the cursor wrapped and
// swept nothing.
func TestReclaimHugeBudget(t *testing.T) {
	s, cfg := newShard(t, 10, true)
	cfg.ExpectedKeys = 100
	s.Init(cfg, now)
	r := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		addCounted(t, s, cfg, r, now)
	}
	require.Equal(t, 0, s.Reclaim(cfg, now+5_000, 3), "the first three slots") // the cursor at 3
	require.Equal(t, 5, s.Reclaim(cfg, now+5_000, math.MaxUint64)+s.Reclaim(cfg, now+5_000, 3), "every dead key, once round the table")
	require.Zero(t, s.Live())
}

// Cell addresses its slot without Go's bounds checks, so an index past the table panics rather
// than read (or hand out for writing) memory beyond it.
func TestCellOutOfRangePanics(t *testing.T) {
	s, _ := newShard(t, 10, false)
	tb := s.Table()
	require.NotPanics(t, func() { tb.Cell(tb.Slots() - 1) })
	for _, i := range []uint64{tb.Slots(), tb.Slots() + 3, 1 << 40, math.MaxUint64} {
		require.PanicsWithError(t, fmt.Sprintf("shard: Cell(%d) of a table of %d slots", i, tb.Slots()), func() { tb.Cell(i) })
	}
}
