package engine

import (
	"math/rand/v2"
	satomic "sync/atomic"
	"testing"
)

// BenchmarkDecisionParts splits the cost of one AllowKey on 1M tracked keys, uniform, into
// what a decision is built of, each measured the same way (one goroutine, a loop of independent
// keys):
//
//   - floor: the key's hash and one atomic add into an array of padded counters (no lookup);
//   - floor-cas: the floor with a load and a compare-and-swap in place of the add;
//   - lookup: the hash, the lock-free lookup of the key's cell and one atomic add on it;
//   - lookup-load: the lookup with a plain load of the cell in place of the add;
//   - allow: the whole decision (AllowKey);
//   - batch: the whole decision by AllowKeyBatch, 64 keys a call (ns/op is per key).
//
// On a table larger than the caches, floor is fastest because consecutive iterations overlap
// their cache misses. floor-cas and lookup-load show what does and does not stop that: a locked
// operation after a load does not (floor-cas costs what floor does), a probe loop's exit that is
// mispredicted does (see shard.Table.Lookup and shard's BenchmarkMissesInFlight). AllowKeyBatch
// exists for callers that can hand over many keys at once.
func BenchmarkDecisionParts(b *testing.B) {
	const nk = 1 << 20
	l := newBench(b)
	for i := range nk {
		l.AllowKey(uint64(i), 1)
	}
	r := rand.New(rand.NewPCG(3, 4))
	idx := make([]uint64, 1<<16)
	for i := range idx {
		idx[i] = uint64(r.IntN(nk))
	}
	b.Run("part=floor", func(b *testing.B) {
		a := make([]uint64, nk*8) // 64 bytes per counter
		for i := 0; b.Loop(); i++ {
			h := l.hashKey(idx[i&(len(idx)-1)])
			satomic.AddUint64(&a[(h&(nk-1))*8], 1)
		}
	})
	b.Run("part=floor-cas", func(b *testing.B) {
		a := make([]uint64, nk*8)
		for i := 0; b.Loop(); i++ {
			h := l.hashKey(idx[i&(len(idx)-1)])
			p := &a[(h&(nk-1))*8]
			w := satomic.LoadUint64(p)
			satomic.CompareAndSwapUint64(p, w, w+1)
		}
	})
	b.Run("part=lookup", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			h := nonzero(l.hashKey(idx[i&(len(idx)-1)]))
			satomic.AddUint64(l.shard(h).Table().Find(h), 1)
		}
	})
	b.Run("part=lookup-load", func(b *testing.B) {
		var sum uint64
		for i := 0; b.Loop(); i++ {
			h := nonzero(l.hashKey(idx[i&(len(idx)-1)]))
			sum += satomic.LoadUint64(l.shard(h).Table().Find(h))
		}
		if sum == 0 {
			b.Fatal("every key was tracked with a count, yet every load read 0")
		}
	})
	b.Run("part=allow", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			l.AllowKey(idx[i&(len(idx)-1)], 1)
		}
	})
	b.Run("part=batch", func(b *testing.B) {
		var out [64]bool
		for i := 0; i < b.N; i += len(out) {
			l.AllowKeyBatch(idx[i&(len(idx)-1):][:len(out)], 1, out[:])
		}
	})
}
