package engine

import (
	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/shard"
)

// batchChunk is how many keys a batch hashes and prefetches before it decides them: a shard.Run's
// worth (see shard.RunLen for why 32; bench/README.md, "Runs of 32 keys").
const batchChunk = shard.RunLen

// AllowBatch decides n units for each of keys[i], writing whether it was admitted to out[i]. It
// decides min(len(keys), len(out)) keys, in order, each exactly as AllowN(keys[i], n) would,
// called in that order: a key that appears twice is counted twice, and its second decision sees
// the first. It leaves the rest of out untouched. It is safe for concurrent use; the keys of one
// batch are decided one after the other, not atomically as a group, so other goroutines'
// decisions for the same keys may fall between them.
//
// It decides in runs of 32 keys, each run at one reading of the clock (a run takes about a
// microsecond or two, and the clock counts milliseconds), and checks Close once per run: a batch that
// Close interrupts may decide the rest of its current run after Close has returned, as an Allow
// call that Close interrupts may.
//
// It is faster per key than a loop of Allow calls on a table larger than the processor's caches:
// it hashes a run of keys, then asks for each key's home cache line 18 keys before deciding it,
// so that the memory loads of many keys overlap instead of following one another. Once a batch
// meets its second new key, it takes the batch for a flood of them and also walks each later
// key's probe ahead of its decision, 12 and then 6 keys before it, asking for the lines that the
// probe will need to find the key's empty slot. It retains no key, and deciding keys already
// tracked allocates nothing; a new key may grow its shard's table (see WithExpectedKeys), and a
// new sliding-log key allocates its log, as in Allow.
func (l *Limiter) AllowBatch(keys []string, n int64, out []bool) {
	m := min(len(keys), len(out))
	keys, out = keys[:m], out[:m]
	var r run
	for len(keys) > 0 {
		c := min(len(keys), batchChunk)
		for i, k := range keys[:c] {
			r.set(l, i, l.hashString(k))
		}
		l.decideRun(&r, n, out[:c])
		keys, out = keys[c:], out[c:]
	}
}

// AllowKeyBatch is AllowBatch for integer keys: out[i] is what AllowKey(keys[i], n) would
// return, called in order, for the first min(len(keys), len(out)) keys. It is safe for concurrent
// use, as AllowBatch is, with the same caveat: the batch is not decided atomically as a group.
func (l *Limiter) AllowKeyBatch(keys []uint64, n int64, out []bool) {
	// AllowBatch's loop with the other hash. One generic function for both was tried: Go compiles
	// a type parameter's type switch into a run-time test per key, with both hashes in each copy.
	m := min(len(keys), len(out))
	keys, out = keys[:m], out[:m]
	var r run
	for len(keys) > 0 {
		c := min(len(keys), batchChunk)
		for i, k := range keys[:c] {
			r.set(l, i, l.hashKey(k))
		}
		l.decideRun(&r, n, out[:c])
		keys, out = keys[c:], out[c:]
	}
}

// run is a batch's run of keys: their hashes, made nonzero, and their lookups; and how many keys
// the batch's runs so far found new.
type run struct {
	hs     [batchChunk]uint64
	absent int
	shard.Run
}

// flood reports whether the batch is taken for a flood of new keys: it has met two.
func (r *run) flood() bool { return r.absent >= 2 }

// How far ahead of a key's decision decideRun works on its lookup, in keys, and how many keys it
// takes at a time. A new key's decision takes about 60 ns when its lines have arrived (engine's
// BenchmarkInsertSteady), and a line from memory 100 to 300 ns: six keys apart is about one
// memory latency. Four lines for each stage of a walk (walkPairs) left the fewest probes waiting
// (bench/README.md, "A flood's probes, walked ahead in stages").
const (
	homeAhead = 18 // PrefetchSpan: the home lines
	walkFirst = 12 // the first Walk, which reads the home lines
	walkNext  = 6  // the second Walk, which reads the lines the first asked for
	aheadStep = 2  // keys at a time
	walkPairs = 2  // lines a Walk asks for, in pairs
)

// set records h as the run's i-th key and begins its lookup.
func (r *run) set(l *Limiter, i int, h uint64) {
	h = nonzero(h)
	r.hs[i] = h
	r.Set(i, l.shard(h), h)
}

// decideRun decides the run's first len(out) keys in order, each exactly as admit would, but with
// the checks that do not depend on the key (the cost, Close, the clock's reading and its refresh)
// made once for the run. The loop repeats admit's fast way instead of sharing a function with it:
// such a function is too large for the compiler to inline, and would add a call to every Allow.
func (l *Limiter) decideRun(r *run, n int64, out []bool) {
	hs := r.hs[:len(out)]
	m := len(hs)
	if uint64(n) > uint64(l.maxCost) || l.closed.Load() {
		for i, h := range hs {
			out[i] = l.admitSlow(h, n)
		}
		return
	}
	// The run's first keys have no keys before them to hide their lines behind: they are asked
	// for all at once, and wait for them.
	r.PrefetchSpan(0, min(m, homeAhead))
	if r.flood() {
		r.Walk(hs, 0, walkFirst, walkPairs)
		r.Walk(hs, 0, walkNext, walkPairs)
	}
	now := l.clk.Now()
	if clock.DueFor(len(hs)) {
		now = l.clk.Refresh()
	}
	for i, h := range hs {
		if i%aheadStep == 0 {
			r.PrefetchSpan(i+homeAhead, min(m, i+homeAhead+aheadStep))
			if r.flood() {
				r.Walk(hs, i+walkFirst, i+walkFirst+aheadStep, walkPairs)
				r.Walk(hs, i+walkNext, i+walkNext+aheadStep, walkPairs)
			}
		}
		sh := l.shard(h)
		if sh.Due(now) {
			out[i] = l.admitSlow(h, n)
		} else if t, c, free := r.Resume(i, h); c == nil {
			// A second new key in one batch is taken for a flood of them: from here on the later
			// keys' probes are walked ahead of their decisions. Batches of tracked keys, and the odd
			// new key, never pay for it: 84% of tracked keys lie within four slots of their home.
			if r.absent++; r.absent == 2 {
				next := i - i%aheadStep + aheadStep // the loop's next step walks from there
				r.Walk(hs, i+1, next+walkFirst, walkPairs)
				r.Walk(hs, i+1, next+walkNext, walkPairs)
			}
			out[i] = l.admitNew(h, n, now, sh, t, free)
		} else if ok, st := l.codec.Admit(c, now, n); st == atomic.OK {
			out[i] = ok
			continue // decided at now
		} else {
			out[i] = l.admitSlow(h, n)
		}
		// An insert, or the general way, may have decided at a later reading (see shard.Acquire);
		// the rest of the run must not go back before it.
		now = max(now, l.clk.Now())
	}
}
