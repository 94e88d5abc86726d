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
//   - lookup: the hash, the lock-free lookup of the key's cell and one atomic add on it;
//   - allow: the whole decision (AllowKey);
//   - batch: the whole decision by AllowKeyBatch, 64 keys a call (ns/op is per key).
//
// On a table larger than the caches, floor is fastest because consecutive iterations overlap
// their cache misses: nothing in an iteration waits on its own miss except the add. The lookup
// waits on it to compare keys, and the decision computes the policy from the loaded state before
// its compare-and-swap; every instruction that waits keeps the processor from reaching the next
// key's load. AllowKeyBatch exists for callers that can hand over many keys at once.
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
	b.Run("part=lookup", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			h := nonzero(l.hashKey(idx[i&(len(idx)-1)]))
			satomic.AddUint64(l.shard(h).Table().Find(h), 1)
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
