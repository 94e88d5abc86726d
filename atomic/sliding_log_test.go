package atomic

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

func newLogCell(t *testing.T, codec Codec, now int64) *uint64 {
	t.Helper()
	var cell uint64
	f, _ := codec.Fresh(now)
	Store(&cell, 1, f, 0)
	return &cell
}

func TestSlidingLogCodec(t *testing.T) {
	p := policy.SlidingLog{Limit: 3, Window: time.Second}
	codec := NewSlidingLog(p)
	require.Equal(t, 1, codec.Words())
	require.Equal(t, int64(math.MaxInt64), codec.Horizon())
	_, ok := codec.(Evictor)
	require.True(t, ok)

	a := newLogCell(t, codec, epoch)
	b := newLogCell(t, codec, epoch)
	require.NotEqual(t, *a, *b, "each key has its own entry")
	r, st := codec.Take(a, epoch, 2)
	require.Equal(t, OK, st)
	require.True(t, r.Allowed)
	ok, _ = codec.Admit(a, epoch+400, 1)
	require.True(t, ok)
	ok, _ = codec.Admit(a, epoch+400, 1)
	require.False(t, ok)
	r, _ = codec.Take(a, epoch+500, 1)
	require.False(t, r.Allowed)
	require.Equal(t, int64(500), r.RetryAfterMs, "the oldest entry (epoch) leaves the window (now-1000, now] at epoch+1000")
	_, pr, _ := codec.Peek(b, epoch+500)
	require.Equal(t, int64(0), pr.Count, "keys do not share logs")
	r, pr = codec.PeekFresh(epoch)
	require.True(t, r.Allowed)
	require.Equal(t, int64(0), pr.Count)

	w, _ := Load(a, 1)
	require.False(t, codec.Dead(w, 0, epoch, epoch+1399))
	require.True(t, codec.Dead(w, 0, epoch, epoch+1400))
	n, _, changed := codec.Normalize(w, 0, epoch+5000)
	require.False(t, changed)
	require.Equal(t, w, n)
	_, evictable := codec.Stale(w, 0, epoch+5000, 0)
	require.False(t, evictable, "EvictStalest would mark the cell without the entry's lock")
}

// TestSlidingLogEvictionFreesAndReuses: an evicted entry is reused by the next key, and a writer
// that still holds the evicted key's cell cannot reach it.
func TestSlidingLogEvictionFreesAndReuses(t *testing.T) {
	p := policy.SlidingLog{Limit: 2, Window: time.Second}
	codec := NewSlidingLog(p)
	ev := codec.(Evictor)
	a := newLogCell(t, codec, epoch)
	codec.Take(a, epoch, 2)
	require.False(t, ev.Evict(a, epoch, epoch+999), "entries still in the window")
	h := *a
	require.True(t, ev.Evict(a, epoch, epoch+1000))
	require.Equal(t, h|Dead, *a)
	require.False(t, ev.Evict(a, epoch, epoch+1000), "already evicted")

	b := newLogCell(t, codec, epoch+1000)
	require.Equal(t, h, *b, "the freed entry is reused first")
	_, st := codec.Take(a, epoch+1000, 1)
	require.Equal(t, IsDead, st)
	_, _, st = codec.Peek(a, epoch+1000)
	require.Equal(t, IsDead, st)
	_, pr, _ := codec.Peek(b, epoch+1000)
	require.Equal(t, int64(0), pr.Count, "the new key starts empty")

	// A rebuild marks a cell Moved, and releases the entry when it drops the state.
	codec.Take(b, epoch+1000, 1)
	w, _, live := Mark(b, 1, Moved)
	require.True(t, live)
	_, st = codec.Take(b, epoch+1000, 1)
	require.Equal(t, IsMoved, st)
	require.False(t, ev.Evict(b, epoch, epoch+5000), "a moved cell is the rebuild's")
	require.True(t, codec.Dead(w, 0, epoch, epoch+2000))
	ev.Release(w, 0)
	c := newLogCell(t, codec, epoch+2000)
	require.Equal(t, w, *c)
}

// TestSlidingLogConcurrentExactness: writers on one cell while an evictor tries to evict it; the
// log never admits more than its limit, and a state is never evicted while it holds entries.
func TestSlidingLogConcurrentExactness(t *testing.T) {
	p := policy.SlidingLog{Limit: 1000, Window: time.Minute}
	codec := NewSlidingLog(p)
	ev := codec.(Evictor)
	cell := newLogCell(t, codec, epoch)
	ok, _ := codec.Admit(cell, epoch, 1) // an empty log is dead: give it an entry first
	require.True(t, ok)
	var admitted [8]int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	evicted := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if ev.Evict(cell, epoch, epoch) {
				evicted++
			}
		}
	}()
	var writers sync.WaitGroup
	for w := range admitted {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for range 400 {
				if ok, st := codec.Admit(cell, epoch, 1); st == OK && ok {
					admitted[w]++
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	total := int64(1)
	for _, n := range admitted {
		total += n
	}
	require.Equal(t, p.Limit, total)
	_, pr, st := codec.Peek(cell, epoch)
	require.Equal(t, OK, st)
	require.Equal(t, p.Limit, pr.Count)
	require.Zero(t, evicted, "a log with entries in the window is never dead")
}

// TestSlidingLogDecidesNoEarlierThanItsCreation: a request whose clock reading predates the log's
// creation (a revival after an eviction) is recorded at the creation time, where the evicted log
// can no longer count.
func TestSlidingLogDecidesNoEarlierThanItsCreation(t *testing.T) {
	codec := NewSlidingLog(policy.SlidingLog{Limit: 1, Window: time.Second})
	cell := newLogCell(t, codec, epoch+1000)
	r, _ := codec.Take(cell, epoch, 1)
	require.True(t, r.Allowed)
	require.Equal(t, epoch+2000, r.ResetAtMs, "recorded at epoch+1000")
	r, _ = codec.Take(cell, epoch, 1)
	require.False(t, r.Allowed)
	require.Equal(t, int64(2000), r.RetryAfterMs, "from the reader's own now")
	_, pr, _ := codec.Peek(cell, epoch+1999)
	require.Equal(t, int64(1), pr.Count)
	_, pr, _ = codec.Peek(cell, epoch+2000)
	require.Equal(t, int64(0), pr.Count)
}
