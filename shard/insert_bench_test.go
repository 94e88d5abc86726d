package shard

import (
	"math/rand/v2"
	"strconv"
	satomic "sync/atomic"
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
			cfg.ExpectedKeys = load.expected
			ss := randomShards(cfg, shards*per, 1)
			r := rand.New(rand.NewPCG(7, 8))
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

// missLine is one cache line of BenchmarkMissesInFlight's array, eight random words.
type missLine [8]uint64

// BenchmarkMissesInFlight shows, on an array as large as the tables of BenchmarkAbsentKey at load
// 0.8 (200 MB), what lets consecutive cache misses overlap and what does not; package atomic's
// BenchmarkMissOverlap does the same for the steps of a decision on a found cell. Each op touches
// one random line:
//
//   - part=add adds to it atomically, as the floor of the peer benchmarks does: consecutive adds
//     overlap their misses, locked instruction and all;
//   - part=chain loads it at an address that depends on the previous op's load: one miss at a time,
//     so this is a miss's whole latency;
//   - part=branch loads it and branches on the word loaded, which is random, so that half the
//     branches are mispredicted;
//   - part=probe scans its words to the first that meets a test, as a probe scans to the first
//     empty slot, and adds to that word: the loop's exit, a random distance in, is mispredicted on
//     most ops;
//   - part=work-N loads it and then runs N multiply steps that depend on the word loaded (about 4N
//     instructions), and part=work-N-alone runs the same steps on a word it did not load.
//
// Two things keep misses from overlapping, in part or in whole. A mispredicted loop exit does in
// part (part=probe between part=add and part=chain), most likely because the processor went on
// around the loop rather than on to the next op, whose load then starts only once the exit is
// known. A mispredicted
// branch both of whose ways lead on to the next op does not (part=branch near part=add): the loads
// it throws away have asked for their lines already. And the instructions between one op's load
// and the next's do, in whole once there are enough of them: an op waits in the processor's
// reorder window until its line arrives, and once the ops in flight fill that window (a few hundred
// instructions) the next op's load cannot start; part=work-100 costs about part=chain plus
// part=work-100-alone.
//
//	go test ./shard -run '^$' -bench MissesInFlight -benchtime 2000000x -count 6
func BenchmarkMissesInFlight(b *testing.B) {
	const lines = 10_000_000 * 5 / 4 * 16 / 64
	a := make([]missLine, lines)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range a {
		for j := range a[i] {
			a[i][j] = r.Uint64()
		}
	}
	idx := make([]uint32, 1<<20)
	for i := range idx {
		idx[i] = uint32(r.IntN(lines))
	}
	var taken int
	var sum uint64
	// Whether a part that uses taken, or sum, ran: -bench may pick some parts only.
	var usedTaken, usedSum bool
	b.Run("part=add", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			satomic.AddUint64(&a[idx[i&(len(idx)-1)]][0], 1)
		}
	})
	b.Run("part=chain", func(b *testing.B) {
		var v uint64
		for i := 0; b.Loop(); i++ {
			// v&1 is 0 or 1: the address waits for the previous load, and stays random.
			v = satomic.LoadUint64(&a[(uint64(idx[i&(len(idx)-1)])+v&1)%lines][0])
		}
		sum, usedSum = sum+v, true
	})
	b.Run("part=branch", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if satomic.LoadUint64(&a[idx[i&(len(idx)-1)]][0])&1 == 0 {
				taken = bump(taken)
			}
		}
		usedTaken = true
	})
	b.Run("part=probe", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			l := &a[idx[i&(len(idx)-1)]]
			// Scan to the first word with its two low bits clear (the last word if none), as a
			// probe scans to the first empty slot: how far in that is is random, as a probe's is.
			// The add keeps the low bits, so the distances stay as random as they were made.
			j := 0
			for ; j < len(l)-1; j++ {
				if satomic.LoadUint64(&l[j])&3 == 0 {
					break
				}
			}
			satomic.AddUint64(&l[j], 4)
		}
	})
	for _, n := range []int{25, 50, 100} {
		name := "part=work-" + strconv.Itoa(n)
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				sum += mix(satomic.LoadUint64(&a[idx[i&(len(idx)-1)]][0]), n)
			}
			usedSum = true
		})
		b.Run(name+"-alone", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				sum += mix(uint64(i), n)
			}
			usedSum = true
		})
	}
	if usedTaken && taken == 0 || usedSum && sum == 0 {
		b.Fatal("the ops' results were not used")
	}
}

// bump is kept out of line so that part=branch compiles to a branch, not a conditional move.
//
//go:noinline
func bump(n int) int { return n + 1 }

// mix runs n dependent multiply steps on x.
//
//go:noinline
func mix(x uint64, n int) uint64 {
	for range n {
		x = x*0x9e3779b97f4a7c15 + 1
	}
	return x
}

// BenchmarkReclaim times a visit of 64 slots over 256 shards of 4,096 live keys each (the layout
// of a 2^20-key cap), shards taken in turn, so that each visit reads lines the last 255 did not,
// and no key is dead, as in a flood of new keys at the key cap:
//
//	go test ./shard -run '^$' -bench Reclaim -count 6
//
// how=reclaim is the bounded reclaim a new key at the engine's key cap makes before it evicts
// (Reclaim, under the shard's lock); how=sweep visits the same slots as the background sweeper
// does, without the lock (SweepRange).
func BenchmarkReclaim(b *testing.B) {
	const shards, per, span = 256, 4096, 64
	_, cfg := newShard(b, 10, true)
	cfg.ExpectedKeys = per
	ss := randomShards(cfg, shards*per, 5)
	evicted := 0
	b.Run("how=reclaim", func(b *testing.B) {
		i := 0
		for b.Loop() {
			evicted += ss[i%shards].Reclaim(cfg, now, span)
			i++
		}
	})
	b.Run("how=sweep", func(b *testing.B) {
		var from [shards]uint64
		i := 0
		for b.Loop() {
			s := &ss[i%shards]
			t := s.Table()
			evicted += s.SweepRange(cfg, t, from[i%shards], from[i%shards]+span, now)
			from[i%shards] = (from[i%shards] + span) % t.Slots()
			i++
		}
	})
	if evicted != 0 {
		b.Fatalf("%d live keys evicted", evicted)
	}
}

// randomShards returns 256 shards (cfg.Shift becomes 8) holding n random keys inserted at now, each
// with one unit counted (a key holding nothing is dead), the keys drawn from a generator seeded
// with seed.
func randomShards(cfg *Config, n int, seed uint64) []Shard {
	cfg.Shift = 8
	ss := make([]Shard, 256)
	for i := range ss {
		ss[i].Init(cfg, now)
	}
	r := rand.New(rand.NewPCG(seed, seed+1))
	for range n {
		h := r.Uint64() | 1
		ss[h>>56].AdmitFrom(cfg, h, now, 1, nil, 0, false)
	}
	return ss
}
