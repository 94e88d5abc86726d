package shard

import (
	satomic "sync/atomic"
	"unsafe"
)

// RunLen is the most lookups a Run holds, in arrays small enough for a stack frame. It is about
// twice the cache misses a core keeps in flight (10 to 24 line fill buffers on current x86 and
// arm64 cores), so that a run's later prefetches are already queued when its first lines arrive.
// On the 2-core Zen 5 VM of bench/README.md, AllowBatch on 1M keys measured 10 to 27% faster with
// runs of 32 than of 16, and 64 was within noise of 32.
const RunLen = 32

// A Run is up to RunLen lookups begun together, so that their cache misses overlap instead of
// following one another. Set records each key's table and the address of its home slot, Prefetch
// then asks for all of their cache lines in one call, and Lookup finds each key's cell once its
// lines have had time to arrive. A Run is a value for one goroutine, kept on its stack; the
// lookups read tables without a lock and write nothing, as Table.Lookup does.
type Run struct {
	tables [RunLen]*Table
	lines  [RunLen]unsafe.Pointer
}

// Set records key h, whose shard is s, as lookup i (below RunLen): the table s holds now, and the
// address of h's home slot in it.
func (r *Run) Set(i int, s *Shard, h uint64) {
	i &= RunLen - 1
	t := s.Table()
	r.tables[i], r.lines[i] = t, unsafe.Pointer(t.keyAt(t.home(h)))
}

// Prefetch starts loading, for each of the first n lookups (n <= RunLen), the cache line of its
// home slot, and the next line too when the home slot starts in the second half of its line, and
// returns at once. At the tables' load a probe walks 3.5 to 4 slots from its home
// (BenchmarkProbeLines), so from the second half of a line it most often crosses into the next,
// and from the first half it most often does not. In AllowBatch on 1M uniform keys this measured
// 6 to 7% faster than always asking for the home line and the two after it; the home line alone
// was 5% slower, and always two or four lines the same as three (measured earlier). Most likely a
// run asks for more lines than the core keeps in flight, so each line asked for in vain delays
// one that is needed.
// On amd64 the lines are asked for to be written, as the decisions that follow will most likely
// write them: with two goroutines batching on one table, asking for them to be read left each
// swap a second trip to the other core (see prefetchWrite). Where the package has no prefetch
// instruction (see prefetchAll) it loads each home slot's word instead.
func (r *Run) Prefetch(n int) {
	if n > 0 {
		prefetchAll(&r.lines[0], min(n, RunLen))
	}
}

// Lookup returns what Table.Lookup does for key h, recorded as lookup i, in the table that Set
// saw, with that table, for Shard.AcquireFrom: h's cell, or nil and the empty slot where its
// probe stopped. It takes no lock and writes nothing. A table replaced since Set is still safe to
// read: its cells are all marked Moved, which the caller's codec reports, as it would to a lookup
// that raced with the rebuild.
func (r *Run) Lookup(i int, h uint64) (t *Table, cell *uint64, free uint64) {
	t = r.tables[i&(RunLen-1)]
	cell, free = t.Lookup(h)
	return t, cell, free
}

// PrefetchProbes asks, after Prefetch, for the lines that the probes of keys not near their
// home will walk: for each lookup i from from to len(hs)-1 (hs[i] its key) whose near slots (see
// Table.Lookup) neither hold hs[i] nor end its probe with an empty slot, the three lines after
// its home slot's (most often where such a probe ends, at the tables' load). It reads each home's
// near slots, which Prefetch asked for, and picks the lines to ask for without a branch on what it
// read, so that the lookups' loads are all under way at once; a lookup that needs no more asks for
// its home line again, which costs nothing. It takes no lock, writes nothing, and returns without
// waiting for the lines. A lookup whose home lies within farBytes of its table's end is left out:
// its addresses must stay inside the table.
//
// Why: a key new to the table is absent, and at the tables' load its probe walks about 13 slots,
// four lines, to the empty slot where it goes; each line after the home's would otherwise be a
// miss that its decision waits for, one new key after another (bench/README.md, "What an insert
// costs"). It is not worth its cost where the keys are tracked (84% are within their near
// slots), which is why AllowBatch asks for it only once a run has met new keys.
func (r *Run) PrefetchProbes(hs []uint64, from int) {
	n := min(len(hs), RunLen)
	if from < 0 || from >= n {
		return
	}
	var next, after [RunLen]unsafe.Pointer
	for i := from; i < n; i++ {
		next[i], after[i] = r.tables[i].farLines(hs[i], r.lines[i])
	}
	prefetchAll(&next[from], n-from)
	prefetchAll(&after[from], n-from)
}

// farLines returns the two addresses PrefetchProbes gives prefetchAll for key h, whose home slot
// is at p: one 64 and one 160 bytes on from p (with the line 32 bytes on from each, the three
// lines after p's) when h is not among the near slots and no near slot is empty, else p twice.
// It returns p twice too when home lies within farBytes of the table's end.
func (t *Table) farLines(h uint64, p unsafe.Pointer) (a, b unsafe.Pointer) {
	if t.home(h)+farBytes>>(t.slotShift&63) >= t.n {
		return p, p
	}
	// Lookup's four loads. A helper shared with it, even inlined, added an instruction (an
	// inlining mark) to every lookup.
	s := uintptr(1) << (t.slotShift & 63)
	k0 := satomic.LoadUint64((*uint64)(p))
	k1 := satomic.LoadUint64((*uint64)(unsafe.Add(p, s)))
	k2 := satomic.LoadUint64((*uint64)(unsafe.Add(p, 2*s)))
	k3 := satomic.LoadUint64((*uint64)(unsafe.Add(p, 3*s)))
	a, b = unsafe.Add(p, lineBytes), unsafe.Add(p, farBytes)
	if ends(k0, h)|ends(k1, h)|ends(k2, h)|ends(k3, h) != 0 {
		a, b = p, p
	}
	return a, b
}

const (
	lineBytes = 64 // a cache line on the processors the package is tuned for
	// farBytes is the furthest address PrefetchProbes forms past a home slot.
	farBytes = lineBytes * 5 / 2
)

// ends returns 1 when a probe for h stops at a slot holding k (k is h, or the slot is empty),
// else 0, without a branch.
func ends(k, h uint64) uint {
	var e uint
	if k == h {
		e = 1
	}
	if k == 0 {
		e = 1
	}
	return e
}
