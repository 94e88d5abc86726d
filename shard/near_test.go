package shard

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	satomic "sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/atomic"
)

// keyWithHome returns a random odd hash whose home slot in t is hm.
func keyWithHome(t *Table, r *rand.Rand, hm uint64) uint64 {
	for {
		if h := r.Uint64() | 1; t.home(h) == hm {
			return h
		}
	}
}

// TestFindAtEveryDistance puts a key at every distance from every home slot, wrapping past the
// last slot included, in tables of one-word and two-word cells: Find, Lookup and a Run find the
// key's own cell whether it lies within the near slots or past them, and a key with the same home
// that was never put is absent (Lookup, and a Run's Lookup, then return the empty slot that ends
// the run). Each cell holds its slot's number, so a lookup that returned a neighbour's cell fails.
func TestFindAtEveryDistance(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, words := range []int{1, 2} {
		for _, n := range []uint64{8, 9, 13} {
			for hm := range n {
				for d := range n - 1 { // at least one slot stays empty, to end an absent key's probe
					tb := newTable(n, words, 0)
					h := keyWithHome(tb, r, hm)
					for j := range d + 1 {
						i := (hm + j) % n
						k := r.Uint64() | 1
						if j == d {
							k = h
						}
						tb.put(i, k, words, i, ^i)
					}
					at := (hm + d) % n
					name := "words=" + strconv.Itoa(words) + " n=" + strconv.FormatUint(n, 10) +
						" home=" + strconv.FormatUint(hm, 10) + " distance=" + strconv.FormatUint(d, 10)
					c := tb.Find(h)
					require.Same(t, tb.cellOf(at), c, name)
					w0, w1 := atomic.Load(c, words)
					require.Equal(t, at, w0, name)
					if words == 2 {
						require.Equal(t, ^at, w1, name)
					}
					lc, _ := tb.Lookup(h)
					require.Same(t, c, lc, name)
					var sh Shard
					sh.table.Store(tb)
					var run Run
					run.Set(0, &sh, h)
					rt, rc, _ := run.Lookup(0, h)
					require.Same(t, tb, rt, name)
					require.Same(t, c, rc, name)
					absent := keyWithHome(tb, r, hm)
					require.Nil(t, tb.Find(absent), name)
					ac, free := tb.Lookup(absent)
					require.Nil(t, ac, name)
					require.Equal(t, (hm+d+1)%n, free, name+": the empty slot after the run")
					run.Set(1, &sh, absent)
					rt, rc, rfree := run.Lookup(1, absent)
					require.Same(t, tb, rt, name)
					require.Nil(t, rc, name)
					require.Equal(t, free, rfree, name+": a Run's lookup stops where the table's does")
				}
			}
		}
	}
}

// probeOnly is Find as it was before Lookup looked at the near slots first: slot by slot from the
// home, branching on each key it loads.
func probeOnly(t *Table, h uint64) *uint64 {
	for i := t.home(h); ; {
		if k := satomic.LoadUint64(t.keyAt(i)); k == h {
			return t.cellOf(i)
		} else if k == 0 {
			return nil
		}
		if i++; i == t.n {
			i = 0
		}
	}
}

// BenchmarkFindNear compares, on 1M tracked keys in 256 shards of tables filled the way the
// engine fills them, a lookup and atomic add through the probe loop alone (v=probe) with one
// through Find, which looks at the slots near the home without branching first (v=near):
//
//	go test ./shard -run '^$' -bench FindNear -benchtime 3000000x -count 6
func BenchmarkFindNear(b *testing.B) {
	const keys = 1 << 20
	ss, hs, r := filledShards(b, keys)
	order := make([]uint32, 1<<16)
	for i := range order {
		order[i] = uint32(r.IntN(keys))
	}
	b.Run("v=probe", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			h := hs[order[i&(len(order)-1)]]
			satomic.AddUint64(probeOnly(ss[h>>56].Table(), h), 1)
		}
	})
	b.Run("v=near", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			h := hs[order[i&(len(order)-1)]]
			satomic.AddUint64(ss[h>>56].Table().Find(h), 1)
		}
	})
}

// TestWalk walks probes of every length from every home slot, wrapping past the last slot
// included, in tables of one-word and two-word cells, for a key put at the probe's end and for one
// never put: after one, two or three Walks, asking for 2, 4 or 16 lines at a time, Resume finds
// what Lookup finds (the key's own cell, or the empty slot that ends the probe), and no Walk asks
// for a line past the table's end. A Walk that sees the probe's end stops there. Under -race
// (checkptr) this also checks the addresses Walk forms.
func TestWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, words := range []int{1, 2} {
		for _, n := range []uint64{8, 13, 40} {
			for hm := range n {
				for fill := uint64(0); fill < n; fill += 1 + fill/4 { // slots from home given other keys
					for _, put := range []bool{false, true} {
						tb := newTable(n, words, 0)
						for j := range fill {
							tb.put((hm+j)%n, r.Uint64()|1, words, 0, 0)
						}
						h := keyWithHome(tb, r, hm)
						if put && fill < n-1 {
							tb.put((hm+fill)%n, h, words, 0, 0)
						}
						wantC, wantFree := tb.Lookup(h)
						var sh Shard
						sh.table.Store(tb)
						for _, pairs := range []int{1, 2, 8} {
							for walks := 1; walks <= 3; walks++ {
								name := fmt.Sprintf("words=%d n=%d home=%d filled=%d put=%v pairs=%d walks=%d",
									words, n, hm, fill, put, pairs, walks)
								var run Run
								hs := []uint64{r.Uint64() | 1, h}
								run.Set(0, &sh, hs[0])
								run.Set(1, &sh, h)
								run.Walk(hs, 1, 2, pairs)
								for range walks - 1 {
									before := run.reach[1]
									run.Walk(hs, 1, 2, pairs)
									if run.reach[1] != before { // it asked for lines
										require.LessOrEqual(t, run.reach[1], tb.n<<tb.slotShift, name+": inside the table")
									}
								}
								require.Zero(t, run.reach[0], name+": a lookup outside [from, to) is not walked")
								if run.ended[1] {
									end := wantFree
									if wantC != nil {
										end = (hm + fill) % n
									}
									require.Equal(t, end, run.next[1]%n, name+": the walk stopped at the probe's end")
								}
								rt, c, free := run.Resume(1, h)
								require.Same(t, tb, rt, name)
								require.Equal(t, wantC, c, name)
								require.Equal(t, wantFree, free, name)
							}
						}
					}
				}
			}
		}
	}
}

// TestWalkEndsShortProbes checks that a Walk, which reads the lines PrefetchSpan asked for, sees a
// probe end there when it does, and only then asks for more: a probe that ends in the home line
// ends on the first Walk, and one that runs on past the lines asked for is still open.
func TestWalkEndsShortProbes(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	tb := newTable(4096, 1, 0)
	hm := uint64(64) // a line's first slot when the slots start on a line; at most 3 slots from one
	for j := range uint64(40) {
		tb.put(hm+j, r.Uint64()|1, 1, 0, 0)
	}
	var sh Shard
	sh.table.Store(tb)
	short := keyWithHome(tb, r, hm+40) // its home slot is empty
	long := keyWithHome(tb, r, hm)     // 40 full slots, 10 lines, from its home
	var run Run
	hs := []uint64{short, long}
	run.Set(0, &sh, short)
	run.Set(1, &sh, long)
	run.Walk(hs, 0, 2, 1)
	require.True(t, run.ended[0], "a probe that ends at its home slot ends on the first walk")
	require.Equal(t, hm+40, run.next[0])
	require.False(t, run.ended[1], "a probe 40 slots long runs past the lines asked for")
	reached := run.reach[1]
	run.Walk(hs, 0, 2, 1)
	require.Equal(t, reached+2*lineBytes, run.reach[1], "the second walk asks for two lines more")
	for range 8 {
		run.Walk(hs, 0, 2, 1)
	}
	require.True(t, run.ended[1])
	require.Equal(t, hm+40, run.next[1], "the long probe ends at the first empty slot")
	_, c, free := run.Resume(1, long)
	require.Nil(t, c)
	require.Equal(t, hm+40, free)
}

// BenchmarkFindUniform is a lookup and atomic add of tracked keys in uniformly random order over
// all of them, in 256 shards of tables filled the way the engine fills them: 1M keys (about 20 MB
// of tables, about the size of a large last-level cache) and 8M (about 160 MB, out of every cache).
// Unlike BenchmarkFindNear, whose order cycles through 64K keys, nearly every lookup of the
// larger table misses every cache, as the engine's on 1M or 10M uniform keys do. It measures the
// table's layout for the issue's "one cache line per lookup" (bench/README.md, "Homes aligned to a
// cache line, measured"):
//
//	go test ./shard -run '^$' -bench FindUniform -benchtime 3000000x -count 6
func BenchmarkFindUniform(b *testing.B) {
	for _, keys := range []int{1 << 20, 1 << 23} {
		b.Run("keys="+strconv.Itoa(keys>>20)+"M", func(b *testing.B) {
			ss, hs, r := filledShards(b, keys)
			r.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
			for i := 0; b.Loop(); i++ {
				h := hs[i&(keys-1)]
				satomic.AddUint64(ss[h>>56].Table().Find(h), 1)
			}
		})
	}
}

// filledShards returns 256 shards (a key's shard is its top 8 bits) holding keys random keys,
// inserted as the engine inserts them, the keys in the order inserted, and the generator that
// drew them, for the benchmark to draw on from there.
func filledShards(b *testing.B, keys int) ([]Shard, []uint64, *rand.Rand) {
	_, cfg := newShard(b, 10, false) // a limit of one-word cells, as the engine's default
	cfg.Shift = 8
	ss := make([]Shard, 256)
	for i := range ss {
		ss[i].Init(cfg, now)
	}
	r := rand.New(rand.NewPCG(1, 2))
	hs := make([]uint64, keys)
	for i := range hs {
		hs[i] = r.Uint64() | 1
		ss[hs[i]>>56].Acquire(cfg, hs[i], now)
	}
	return ss, hs, r
}
