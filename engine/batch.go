package engine

// batchChunk is how many keys a batch hashes and touches before it decides them: about as many
// cache misses as a core keeps in flight at once (10 to 16 line fill buffers on current x86 and
// arm64 cores), and small enough that the hashes live in a stack array.
const batchChunk = 16

// AllowBatch decides n units for each of keys[i], writing whether it was admitted to out[i]. It
// decides min(len(keys), len(out)) keys, in order, each exactly as AllowN(keys[i], n) would,
// called in that order: a key that appears twice is counted twice, and its second decision sees
// the first. It leaves the rest of out untouched. It is safe for concurrent use; the keys of one
// batch are decided one after the other, not atomically as a group, so other goroutines'
// decisions for the same keys may fall between them.
//
// It is faster per key than a loop of Allow calls on a table larger than the processor's caches:
// it hashes a run of keys and touches each one's slot before deciding the first, so that their
// memory loads overlap instead of following one another. It allocates nothing and retains no key.
func (l *Limiter) AllowBatch(keys []string, n int64, out []bool) {
	m := min(len(keys), len(out))
	keys, out = keys[:m], out[:m]
	var hs [batchChunk]uint64
	for len(keys) > 0 {
		c := min(len(keys), batchChunk)
		for i, k := range keys[:c] {
			hs[i] = l.hashString(k)
		}
		l.admitBatch(hs[:c], n, out[:c])
		keys, out = keys[c:], out[c:]
	}
}

// AllowKeyBatch is AllowBatch for integer keys: out[i] is what AllowKey(keys[i], n) would
// return, called in order, for the first min(len(keys), len(out)) keys.
func (l *Limiter) AllowKeyBatch(keys []uint64, n int64, out []bool) {
	m := min(len(keys), len(out))
	keys, out = keys[:m], out[:m]
	var hs [batchChunk]uint64
	for len(keys) > 0 {
		c := min(len(keys), batchChunk)
		for i, k := range keys[:c] {
			hs[i] = l.hashKey(k)
		}
		l.admitBatch(hs[:c], n, out[:c])
		keys, out = keys[c:], out[c:]
	}
}

// admitBatch touches the slots of every hash (see shard.Table.Touch), then decides them in order
// by admit, the path of Allow. len(out) >= len(hs). The touch reads the table without a lock, as
// a lookup does; a table replaced in between costs only the touch.
func (l *Limiter) admitBatch(hs []uint64, n int64, out []bool) {
	for _, h := range hs {
		h = nonzero(h)
		l.shard(h).Table().Touch(h)
	}
	out = out[:len(hs)]
	for i, h := range hs {
		out[i] = l.admit(h, n)
	}
}
