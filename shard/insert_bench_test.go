package shard

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// BenchmarkAbsentKey splits an insert at the layout of a 10M-key engine (256 shards of 39,062
// keys, random hashes) into its lookup and the rest, at two table loads: part=lookup finds a key
// absent without a lock, part=insert also inserts it (the shard's lock, the key count, the
// stores, the unlock). At load=0.4 the tables are sized for twice their keys, so the probe is
// short; load=0.8 is the load WithExpectedKeys sizes for, and the lowest a growing table holds
// between rebuilds (it rebuilds at 7/8). Neither grows within the six runs below: their 600,000
// inserts raise the load by 0.024, or 0.048 at 0.8, as the reported load after each run shows.
//
// Besides ns/op it reports what an absent key's probe walks in the tables as they stand before
// the run: slots (from the home to the empty slot that ends it) and cache lines. Linear probing's
// unsuccessful search grows as 1/(1-load)², so at 0.8 it walks about 13 slots, four lines, and an
// insert puts the key in the empty slot found there: the walk is the insert's, and no bound on
// the probe shortens it.
//
//	go test ./shard -run '^$' -bench AbsentKey -benchtime 100000x -count 6
func BenchmarkAbsentKey(b *testing.B) {
	const shards, per = 256, 10_000_000 / 256
	for _, load := range []struct {
		name     string
		expected uint64
	}{{"0.4", 2 * per}, {"0.8", per}} {
		b.Run("load="+load.name, func(b *testing.B) {
			_, cfg := newShard(b, 10, false)
			cfg.Shift = 8
			cfg.ExpectedKeys = load.expected
			ss := make([]Shard, shards)
			for i := range ss {
				ss[i].Init(cfg, now)
			}
			r := rand.New(rand.NewPCG(1, 2))
			for range shards * per {
				h := r.Uint64() | 1
				ss[h>>56].Acquire(cfg, h, now)
			}
			slots, lines := absentWalk(ss, rand.New(rand.NewPCG(3, 4)))
			found := 0
			b.Run("part=lookup", func(b *testing.B) {
				for b.Loop() {
					h := r.Uint64() | 1
					if ss[h>>56].Table().Find(h) != nil {
						found++
					}
				}
				reportLoad(b, ss, slots, lines)
			})
			b.Run("part=insert", func(b *testing.B) {
				for b.Loop() {
					h := r.Uint64() | 1
					s := &ss[h>>56]
					t := s.Table()
					if c, free := t.Lookup(h); c == nil {
						s.AcquireFrom(cfg, h, now, t, free)
					} else {
						found++
					}
				}
				reportLoad(b, ss, slots, lines)
			})
			if found > 10 {
				b.Fatalf("%d random keys were found tracked", found)
			}
		})
	}
}

// absentWalk returns the mean slots and cache lines that the probe of an absent random key
// walks in ss, from its home to the empty slot that ends it, over 100,000 keys.
func absentWalk(ss []Shard, r *rand.Rand) (slots, lines float64) {
	const keys, line = 100_000, unsafe.Sizeof([8]uint64{})
	for range keys {
		h := r.Uint64() | 1
		t := ss[h>>56].Table()
		i := t.home(h)
		last := uintptr(unsafe.Pointer(t.keyAt(i))) / line
		slots, lines = slots+1, lines+1
		for *t.keyAt(i) != 0 {
			if i++; i == t.n {
				i = 0
			}
			slots++
			if l := uintptr(unsafe.Pointer(t.keyAt(i))) / line; l != last {
				lines, last = lines+1, l
			}
		}
	}
	return slots / keys, lines / keys
}

// reportLoad reports the walk measured before the runs and the tables' load after this one.
func reportLoad(b *testing.B, ss []Shard, slots, lines float64) {
	var used, n uint64
	for i := range ss {
		used += ss[i].used
		n += ss[i].Table().Slots()
	}
	b.ReportMetric(float64(used)/float64(n), "load")
	b.ReportMetric(slots, "absent-slots")
	b.ReportMetric(lines, "absent-lines")
}
