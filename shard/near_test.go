package shard

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	satomic "sync/atomic"
	"testing"
	"unsafe"

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
	const shards, keys = 256, 1 << 20
	_, cfg := newShard(b, keys, false)
	cfg.Shift = 8
	ss := make([]Shard, shards)
	for i := range ss {
		ss[i].Init(cfg, now)
	}
	r := rand.New(rand.NewPCG(1, 2))
	hs := make([]uint64, keys)
	for i := range hs {
		hs[i] = r.Uint64() | 1
		ss[hs[i]>>56].Acquire(cfg, hs[i], now)
	}
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

// TestFarLines checks what PrefetchProbes asks for: the three lines after the home slot's (the
// addresses 64 and 160 bytes on) only for a key that is neither among the near slots nor stopped
// there by an empty slot, and never an address past the table's end, for homes at every slot of
// tables of one-word and two-word cells. PrefetchProbes is then run over the same keys, which
// under -race (checkptr) also checks the addresses it forms.
func TestFarLines(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, words := range []int{1, 2} {
		const n = 40
		for hm := range uint64(n) {
			for _, fill := range []uint64{0, 3, 4, 12} { // slots from the home given other keys
				tb := newTable(n, words, 0)
				for j := range fill {
					tb.put((hm+j)%n, r.Uint64()|1, words, 0, 0)
				}
				h := keyWithHome(tb, r, hm)
				p := unsafe.Pointer(tb.keyAt(hm))
				a, b := tb.farLines(h, p)
				name := fmt.Sprintf("words=%d home=%d filled=%d", words, hm, fill)
				end := hm + farBytes>>tb.slotShift
				switch {
				case end >= n, fill < nearSlots:
					require.Equal(t, p, a, name)
					require.Equal(t, p, b, name)
				default:
					require.Equal(t, unsafe.Add(p, 64), a, name)
					require.Equal(t, unsafe.Add(p, 160), b, name)
					last := uintptr(unsafe.Pointer(tb.keyAt(n - 1)))
					require.LessOrEqual(t, uintptr(b), last, name+": inside the table")
				}
				if fill >= nearSlots && end < n {
					// The key itself, past its near slots, is still far.
					tb.put((hm+fill)%n, h, words, 0, 0)
					a, _ = tb.farLines(h, p)
					require.Equal(t, unsafe.Add(p, 64), a, name)
				}
				var sh Shard
				sh.table.Store(tb)
				var run Run
				hs := make([]uint64, RunLen)
				for i := range hs {
					hs[i] = h
					run.Set(i, &sh, h)
				}
				run.PrefetchProbes(hs, 0)
				run.PrefetchProbes(hs, RunLen-1)
				run.PrefetchProbes(hs, RunLen) // nothing to do
			}
		}
	}
	// A key among its near slots stops there.
	tb := newTable(40, 1, 0)
	h := keyWithHome(tb, r, 5)
	for j := range uint64(8) {
		k := r.Uint64() | 1
		if j == 2 {
			k = h
		}
		tb.put(5+j, k, 1, 0, 0)
	}
	p := unsafe.Pointer(tb.keyAt(5))
	a, b := tb.farLines(h, p)
	require.Equal(t, p, a)
	require.Equal(t, p, b)
}
