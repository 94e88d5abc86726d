package atomic

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

// aligned returns a 16-byte aligned two-word cell.
func aligned() *uint64 { return alignedCell() }

func TestCompareAndSwapPair(t *testing.T) {
	c := aligned()
	require.True(t, CompareAndSwap(c, 2, 0, 0, 1, math.MaxUint64))
	require.False(t, CompareAndSwap(c, 2, 1, 0, 5, 5), "the second word differs")
	require.False(t, CompareAndSwap(c, 2, 0, math.MaxUint64, 5, 5), "the first word differs")
	w0, w1 := Load(c, 2)
	require.Equal(t, uint64(1), w0)
	require.Equal(t, uint64(math.MaxUint64), w1)
	Store(c, 2, 7, 8)
	w0, w1 = Load(c, 2)
	require.Equal(t, [2]uint64{7, 8}, [2]uint64{w0, w1})
}

// TestPairIsAtomic: goroutines increment both words of one pair together by CAS; a torn read or a
// lost update would leave them unequal or short.
func TestPairIsAtomic(t *testing.T) {
	c := aligned()
	const workers, each = 8, 20_000
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					w0, w1 := Load(c, 2)
					if w0 != w1 {
						t.Errorf("torn pair %d/%d", w0, w1)
						return
					}
					if CompareAndSwap(c, 2, w0, w1, w0+1, w1+1) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	w0, w1 := Load(c, 2)
	require.Equal(t, uint64(workers*each), w0)
	require.Equal(t, w0, w1)
}

func TestMark(t *testing.T) {
	for _, words := range []int{1, 2} {
		c := aligned()
		Store(c, words, 42, 43)
		w0, w1, ok := Mark(c, words, Moved)
		require.True(t, ok)
		require.Equal(t, uint64(42), w0)
		if words == 2 {
			require.Equal(t, uint64(43), w1)
		}
		_, _, ok = Mark(c, words, Dead)
		require.False(t, ok, "a cell that is not live cannot be marked again")
		require.False(t, MarkIf(c, words, 42, 43, Dead))
	}
}

func TestSlidingCounterCells(t *testing.T) {
	const now = int64(1_764_000_000_123)
	for _, c := range []struct {
		limit int64
		words int
	}{{1, 1}, {100, 1}, {1<<21 - 1, 1}, {1 << 21, 2}, {math.MaxUint32, 2}} {
		codec := NewSlidingCounter(policy.SlidingCounter{Limit: c.limit, Window: time.Second})
		require.Equal(t, c.words, codec.Words(), "limit %d", c.limit)
		cell := aligned()
		f0, f1 := codec.Fresh(now)
		Store(cell, c.words, f0, f1)
		r, st := codec.Take(cell, now, c.limit)
		require.Equal(t, OK, st)
		require.True(t, r.Allowed)
		r, _ = codec.Take(cell, now, 1)
		require.False(t, r.Allowed)
		// 1 ms into the next window the full count carries as floor(L*999/1000).
		_, pr, _ := codec.Peek(cell, now-now%1000+1001)
		require.Equal(t, c.limit*999/1000, pr.Estimate, "limit %d", c.limit)
		w0, w1 := Load(cell, c.words)
		require.False(t, codec.Dead(w0, w1, now, now+1000))
		require.True(t, codec.Dead(w0, w1, now, now+2000))

		Mark(cell, c.words, Dead)
		_, st = codec.Take(cell, now, 1)
		require.Equal(t, IsDead, st)
		_, _, st = codec.Peek(cell, now)
		require.Equal(t, IsDead, st)
	}
}

// TestWordCellReadsARacingWriterAhead: a writer whose clock read a moment later moved the cell into
// the next window; a reader with the earlier time treats the cell's window as current rather than
// as two windows stale.
func TestWordCellReadsARacingWriterAhead(t *testing.T) {
	codec := NewSlidingCounter(policy.SlidingCounter{Limit: 10, Window: time.Second})
	cell := aligned()
	const edge = int64(1_764_000_001_000)
	f0, _ := codec.Fresh(edge)
	Store(cell, 1, f0, 0)
	r, _ := codec.Take(cell, edge, 4)
	require.True(t, r.Allowed)
	r, _ = codec.Take(cell, edge-1, 6)
	require.True(t, r.Allowed, "the reader's now falls back into the cell's window")
	r, _ = codec.Take(cell, edge-1, 1)
	require.False(t, r.Allowed, "and the 10 units counted there are not forgotten")
}
