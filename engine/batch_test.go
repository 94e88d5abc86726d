package engine

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	satomic "sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// batchTwins returns two limiters built alike, each on its own manual clock, with eviction off so
// that no background goroutine changes either between decisions. A key cap makes the batch meet
// the cap's refusal too.
func batchTwins(t testing.TB, limit int64, maxKeys int) (a, b *Limiter, ca, cb *clock.Clock) {
	t.Helper()
	return batchTwinsAt(t, limit, maxKeys, RefuseNewKeys, 4)
}

// batchTwinsAt is batchTwins with a choice at the key cap (EvictStalest makes the batch evict
// keys to make room, and rebuild tables as the churn fills them) and a number of shards.
func batchTwinsAt(t testing.TB, limit int64, maxKeys int, atCap AtCap, shards int) (a, b *Limiter, ca, cb *clock.Clock) {
	t.Helper()
	mk := func() (*Limiter, *clock.Clock) {
		clk := clock.NewManual(start)
		opts := []Option{WithClock(clk), WithEviction(false), WithSeed(11), WithShards(shards)}
		if maxKeys > 0 {
			opts = append(opts, WithMaxKeys(maxKeys), WithAtCap(atCap))
		}
		l, err := New(policy.SlidingCounter{Limit: limit, Window: time.Second}, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l, clk
	}
	a, ca = mk()
	b, cb = mk()
	return a, b, ca, cb
}

// checkT is what the checks need of a *testing.T and a *rapid.T alike.
type checkT interface {
	require.TestingT
	Helper()
}

// checkBatch decides keys on a by AllowBatch and on b by AllowN in order, and requires the same
// answers, the same count of keys, and out untouched past the keys.
func checkBatch(t checkT, a, b *Limiter, keys []string, n int64, outLen int) {
	t.Helper()
	out := make([]bool, outLen)
	for i := range out {
		out[i] = i%3 == 0 // a pattern AllowBatch must leave alone past min(len(keys), len(out))
	}
	a.AllowBatch(keys, n, out)
	m := min(len(keys), len(out))
	for i := range m {
		require.Equal(t, b.AllowN(keys[i], n), out[i], "key %d (%q) of %d", i, keys[i], m)
	}
	for i := m; i < len(out); i++ {
		require.Equal(t, i%3 == 0, out[i], "out[%d] past the keys was written", i)
	}
	require.Equal(t, b.Len(), a.Len())
}

// checkKeyBatch is checkBatch for AllowKeyBatch against AllowKey.
func checkKeyBatch(t checkT, a, b *Limiter, keys []uint64, n int64) {
	t.Helper()
	out := make([]bool, len(keys))
	a.AllowKeyBatch(keys, n, out)
	for i, k := range keys {
		require.Equal(t, b.AllowKey(k, n), out[i], "key %d (%d)", i, k)
	}
	require.Equal(t, b.Len(), a.Len())
}

func TestAllowBatchHandWorked(t *testing.T) {
	l, _ := newSC(t, 2, time.Second, WithEviction(false))
	keys := []string{"a", "b", "a", "a", "c", "b", "b"}
	out := make([]bool, len(keys))
	l.AllowBatch(keys, 1, out)
	// Limit 2: each key's third request in the window is refused, duplicates included.
	require.Equal(t, []bool{true, true, true, false, true, true, false}, out)
	require.Equal(t, 3, l.Len())

	// Fewer outs than keys: only len(out) keys are decided (and counted).
	short := make([]bool, 1)
	l.AllowBatch([]string{"d", "d", "d"}, 1, short)
	require.Equal(t, []bool{true}, short)
	require.Equal(t, 4, l.Len())
	ok, _ := l.Inspect("d")
	require.EqualValues(t, 1, ok.Estimate, "only the one decided request for d is counted")

	// A cost above the limit, and a negative one, are refused.
	l.AllowBatch([]string{"e", "f"}, 3, out)
	require.Equal(t, []bool{false, false}, out[:2])
	l.AllowBatch([]string{"a"}, -1, out)
	require.False(t, out[0])

	l.Close()
	l.AllowBatch([]string{"a"}, 0, out)
	require.False(t, out[0], "closed")
}

// TestAllowBatchLongAndDuplicated: batches longer than one chunk, with every key repeated across
// chunk boundaries and a key cap reached mid-batch, decide as the sequential calls do.
func TestAllowBatchLongAndDuplicated(t *testing.T) {
	a, b, ca, cb := batchTwins(t, 5, 40)
	keys := make([]string, 0, 300)
	ints := make([]uint64, 0, 300)
	for i := range 300 {
		keys = append(keys, "k"+strconv.Itoa(i*7%53))
		ints = append(ints, uint64(i*11%61))
	}
	for round := range 4 {
		checkBatch(t, a, b, keys, int64(round%3), len(keys)+5)
		checkKeyBatch(t, a, b, ints, 1)
		ca.Advance(300 * time.Millisecond)
		cb.Advance(300 * time.Millisecond)
	}
	require.Equal(t, 40, a.Len(), "the key cap was reached")
}

// TestAllowBatchFloodAtLoad: floods of new keys, mixed with tracked ones, into tables grown to
// tens of thousands of keys, so that the tables are at their load (0.8 to 0.875), new keys' probes
// are long and long-tailed, and tables are rebuilt between and during batches: the batch walks the
// probes ahead of its decisions (shard.Run.Walk), and decides as the same calls made one by one.
func TestAllowBatchFloodAtLoad(t *testing.T) {
	a, b, _, _ := batchTwins(t, 2, 0)
	r := rand.New(rand.NewPCG(3, 4))
	keys := make([]uint64, 0, 64)
	for round := range 2000 {
		keys = keys[:0]
		for range 1 + r.IntN(64) {
			k := uint64(round)<<32 | r.Uint64N(1<<32) // new, most likely
			if r.IntN(5) == 0 {
				k = uint64(r.IntN(round+1))<<32 | r.Uint64N(1<<32) // most likely new too, or tracked
			}
			if r.IntN(4) == 0 && len(keys) > 0 {
				k = keys[r.IntN(len(keys))] // a duplicate within the batch
			}
			keys = append(keys, k)
		}
		checkKeyBatch(t, a, b, keys, 1)
	}
	require.Greater(t, a.Len(), 40_000, "tables this large hold long probes")
}

// TestAllowBatchRacingFlood: goroutines batch the same new keys at once, each in its own order,
// into tables at their load: each key is admitted exactly once (the limit is 1), however the
// walks ahead, the inserts and the rebuilds of the goroutines interleave.
func TestAllowBatchRacingFlood(t *testing.T) {
	l, err := New(policy.SlidingCounter{Limit: 1, Window: time.Hour}, WithEviction(false), WithShards(4))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const prefill, keys, goroutines = 30_000, 20_000, 4
	for k := range uint64(prefill) {
		require.True(t, l.AllowKey(k, 1))
	}
	var admitted satomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.New(rand.NewPCG(uint64(g), 5)).Perm(keys)
			batch := make([]uint64, 0, 64)
			out := make([]bool, 64)
			for len(order) > 0 {
				batch = batch[:0]
				for _, k := range order[:min(64, len(order))] {
					batch = append(batch, prefill+uint64(k))
				}
				order = order[len(batch):]
				l.AllowKeyBatch(batch, 1, out)
				for _, ok := range out[:len(batch)] {
					if ok {
						admitted.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(keys), admitted.Load(), "each new key admitted once")
	require.Equal(t, prefill+keys, l.Len())
}

// TestAllowBatchEvictsAtCapAsInOrder: at the key cap with EvictStalest, batches with repeated keys
// decide as the same calls made one by one. The churn rebuilds tables between a run's lookups and
// its decisions, so a key that an earlier decision of the run inserted into the new table is absent
// from the table its lookup saw: it must be found, not given room by evicting another key (or
// itself, losing the units just counted).
func TestAllowBatchEvictsAtCapAsInOrder(t *testing.T) {
	for _, c := range []struct{ shards, maxKeys, keys int }{{1, 5, 16}, {4, 20, 60}, {16, 200, 500}} {
		t.Run(fmt.Sprintf("shards=%d/cap=%d", c.shards, c.maxKeys), func(t *testing.T) {
			a, b, ca, cb := batchTwinsAt(t, 3, c.maxKeys, EvictStalest, c.shards)
			r := rand.New(rand.NewPCG(uint64(c.shards), 9))
			for range 300 {
				keys := make([]string, 1+r.IntN(2*batchChunk))
				for i := range keys {
					keys[i] = "k" + strconv.Itoa(r.IntN(c.keys))
				}
				checkBatch(t, a, b, keys, 1, len(keys))
				d := time.Duration(r.IntN(300)) * time.Millisecond
				ca.Advance(d)
				cb.Advance(d)
			}
			var sa, sb Stats
			a.Stats(&sa)
			b.Stats(&sb)
			require.Equal(t, sb.EvictedAtCap, sa.EvictedAtCap)
			require.NotZero(t, sa.EvictedAtCap, "the cap was never met")
		})
	}
}

// TestAllowBatchModel: random batches of random keys (drawn from a small set, so duplicates are
// common), random costs and clock steps decide as the same calls made one by one.
func TestAllowBatchModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		atCap := AtCap(rapid.IntRange(int(RefuseNewKeys), int(EvictStalest)).Draw(rt, "atCap"))
		a, b, ca, cb := batchTwinsAt(t, rapid.Int64Range(1, 6).Draw(rt, "limit"), rapid.IntRange(0, 12).Draw(rt, "maxKeys"), atCap, rapid.SampledFrom([]int{1, 4}).Draw(rt, "shards"))
		for range rapid.IntRange(1, 8).Draw(rt, "batches") {
			keys := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g", "h", "", "a longer key than the rest"}), 0, 40).Draw(rt, "keys")
			n := rapid.Int64Range(-1, 4).Draw(rt, "n")
			checkBatch(rt, a, b, keys, n, rapid.IntRange(0, 45).Draw(rt, "outLen"))
			ints := rapid.SliceOfN(rapid.Uint64Range(0, 9), 0, 40).Draw(rt, "ints")
			checkKeyBatch(rt, a, b, ints, n)
			d := time.Duration(rapid.IntRange(0, 1500).Draw(rt, "stepMs")) * time.Millisecond
			ca.Advance(d)
			cb.Advance(d)
		}
	})
}

// FuzzAllowBatch: each input is a run of batches. Byte 0 sets the limit and key cap, byte 1 the
// cost and, in its top bit, EvictStalest at the cap (with one shard, whose table the churn then
// rebuilds often); then each byte is a key drawn from 16 (so that batches repeat keys), except that 0xff
// ends a batch and advances both clocks by the next byte times 10ms.
func FuzzAllowBatch(f *testing.F) {
	f.Add([]byte{3, 1, 0, 1, 0, 0, 2, 0xff, 50, 0, 0, 0, 1})
	f.Add([]byte{0x21, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 0xff, 100, 5, 5, 5})
	f.Add([]byte{1, 0, 7, 7, 7, 7, 0xff, 0, 7})
	f.Add([]byte{0x52, 0x82, 12, 7, 3, 0xff, 0, 2, 10, 3, 8, 12, 14, 8, 10, 13, 13, 1, 4, 5, 6, 9, 11, 15, 0, 2, 10, 3, 8, 12, 14, 8, 10, 13, 13, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		limit, maxKeys := int64(data[0]&15)+1, int(data[0]>>4)
		n := int64(data[1]&0x7f%5) - 1
		a, b, ca, cb := batchTwins(t, limit, maxKeys)
		if data[1]&0x80 != 0 {
			a, b, ca, cb = batchTwinsAt(t, limit, maxKeys, EvictStalest, 1)
		}
		var keys []string
		var ints []uint64
		flush := func() {
			checkBatch(t, a, b, keys, n, len(keys))
			checkKeyBatch(t, a, b, ints, n)
			keys, ints = keys[:0], ints[:0]
		}
		data = data[2:]
		for i := 0; i < len(data); i++ {
			if data[i] == 0xff {
				flush()
				if i+1 < len(data) {
					i++
					d := time.Duration(data[i]) * 10 * time.Millisecond
					ca.Advance(d)
					cb.Advance(d)
				}
				continue
			}
			keys = append(keys, "key-"+strconv.Itoa(int(data[i]&15)))
			ints = append(ints, uint64(data[i]&15))
		}
		flush()
	})
}

// TestAllocsBatch: batches of keys made at run time allocate nothing, under both hashes.
func TestAllocsBatch(t *testing.T) {
	for _, seeded := range []bool{false, true} {
		t.Run("seeded="+strconv.FormatBool(seeded), func(t *testing.T) {
			var opts []Option
			if seeded {
				opts = append(opts, WithSeed(7))
			}
			l, _ := newSC(t, 1<<20, time.Second, opts...)
			bufs := make([][]byte, 40)
			keys := make([]string, len(bufs))
			ints := make([]uint64, len(bufs))
			for i := range bufs {
				bufs[i] = []byte("10.0.0." + strconv.Itoa(i) + ":" + strconv.Itoa(len(t.Name())))
				keys[i] = string(bufs[i])
				ints[i] = uint64(i) * 977
			}
			out := make([]bool, len(keys))
			l.AllowBatch(keys, 1, out)
			l.AllowKeyBatch(ints, 1, out)
			require.Zero(t, testing.AllocsPerRun(200, func() {
				// Keys that point into the caller's buffers, in an array of the caller's frame:
				// either would move to the heap, once a run, if AllowBatch let its keys escape.
				var fresh [40]string
				for i, b := range bufs {
					fresh[i] = unsafe.String(&b[0], len(b))
				}
				l.AllowBatch(fresh[:], 1, out)
			}), "AllowBatch")
			require.Zero(t, testing.AllocsPerRun(200, func() { l.AllowKeyBatch(ints, 1, out) }), "AllowKeyBatch")
			require.True(t, out[0])
		})
	}
}

// BenchmarkAllowBatch is BenchmarkAllow's 1M-uniform workload decided in batches of 64 keys;
// ns/op is per key, to set beside BenchmarkAllow/keys=1M/uniform.
func BenchmarkAllowBatch(b *testing.B) {
	l := newBench(b)
	warm(l)
	idx := uniformIndexes()
	var keys [64]string
	var out [64]bool
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(keys) {
		for j := range keys {
			keys[j] = keyNames[idx[(i+j)&(len(idx)-1)]]
		}
		l.AllowBatch(keys[:], 1, out[:])
	}
}
