package shard

import "unsafe"

// RunLen is the most lookups a Run holds, in arrays small enough for a stack frame. It is about
// twice the cache misses a core keeps in flight (10 to 24 line fill buffers on current x86 and
// arm64 cores), so that a run's later prefetches are already queued when its first lines arrive.
// On the 2-core Zen 5 VM of bench/README.md, AllowBatch on 1M keys measured 10 to 27% faster with
// runs of 32 than of 16, and 64 was within noise of 32.
const RunLen = 32

// A Run is up to RunLen lookups begun together, so that their cache misses overlap instead of
// following one another. Set records each key's table and the address of its home slot, Prefetch
// then asks for all of their cache lines in one call, and Find finds each key's cell once its
// lines have had time to arrive. A Run is a value for one goroutine, kept on its stack; the lookups read tables without a
// lock and write nothing, as Table.Find does.
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

// Find returns the cell of key h, recorded as lookup i, in the table that Set saw, or nil. A table
// replaced since then is still safe to read: its cells are all marked Moved, which the caller's
// codec reports, as it would to a Find that raced with the rebuild.
func (r *Run) Find(i int, h uint64) *uint64 {
	return r.tables[i&(RunLen-1)].Find(h)
}
