package atomic

import (
	"math/rand/v2"
	satomic "sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/policy"
)

// BenchmarkMissOverlap decides one unit at a time for random keys among 1M cells whose addresses
// are known (no lookup), each in a 16-byte slot as the engine's table holds them (16 MB, more than
// the caches), and adds work between the load of a cell and its compare-and-swap step by step:
//
//   - add: one atomic add, no load (the floor's operation);
//   - cas: a load and a compare-and-swap of the loaded word plus one;
//   - cas+index: the same, with the window index of now (one multiply, independent of the load)
//     folded into the new word;
//   - admit: the sliding counter's Admit, the whole decision of Allow once the cell is found.
//
// Every cell misses the cache, and what a loop of them costs is how many misses are in flight at
// once. The processor runs ahead to later keys only as far as its reorder window reaches, and no
// instruction after a miss can retire before the miss does: the more instructions a decision
// takes, the fewer later misses start under it. An Allow, at about 200 instructions with its hash
// and lookup, leaves little room for the next one's (bench/README.md, "Why single-key decisions
// stay above the floor").
func BenchmarkMissOverlap(b *testing.B) {
	const keys = 1 << 20
	c := NewSlidingCounter(policy.SlidingCounter{Limit: 1 << 20, Window: 10 * time.Second}).(*slidingCounterWord)
	now := int64(1_764_000_000_000)
	slots := make([]uint64, 2*keys)
	for i := range keys {
		slots[2*i+1], _ = c.Fresh(now)
	}
	r := rand.New(rand.NewPCG(3, 4))
	idx := make([]uint32, 1<<16)
	for i := range idx {
		idx[i] = uint32(r.IntN(keys))
	}
	cell := func(i int) *uint64 { return &slots[2*int(idx[i&(len(idx)-1)])+1] }
	b.Run("step=add", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			satomic.AddUint64(cell(i), 1)
		}
	})
	b.Run("step=cas", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			p := cell(i)
			w := satomic.LoadUint64(p)
			satomic.CompareAndSwapUint64(p, w, w+1)
		}
	})
	b.Run("step=cas+index", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			p := cell(i)
			w := satomic.LoadUint64(p)
			// The index is positive, so this adds 0; the compiler cannot know that.
			satomic.CompareAndSwapUint64(p, w, w+1+uint64(c.p.Index(now))>>63)
		}
	})
	b.Run("step=admit", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if ok, st := c.Admit(cell(i), now, 1); !ok || st != OK {
				b.Fatal("a fresh key with room was refused")
			}
		}
	})
}
