package shard

import (
	satomic "sync/atomic"
	"unsafe"
)

// RunLen is the most lookups a Run holds, in arrays small enough for a stack frame. AllowBatch
// asks for a key's lines up to 18 keys ahead of its decision, but only within a run, so each run's
// first keys wait for theirs: a longer run waits less often. When AllowBatch still asked for a
// whole run's lines at once, on the 2-core Zen 5 VM of bench/README.md, it measured 10 to 27%
// faster on 1M keys with runs of 32 than of 16, and 64 within noise of 32; with lines asked for
// ahead, 64 was again within noise of 32 (a scratch run, bench/README.md, "A flood's probes,
// walked ahead in stages").
const RunLen = 32

// A Run is up to RunLen lookups begun ahead of their decisions, so that their cache misses overlap
// instead of following one another. Set records each key's table and the address of its home slot;
// PrefetchSpan asks for their home lines; Walk, for keys likely new to their tables, follows their
// probes through the lines that have arrived and asks for the next; and Lookup, or Resume after a
// Walk, finds each key's cell once its lines have had time to arrive. A Run is a value for one
// goroutine, kept on its stack; its lookups read tables without a lock and write nothing but the
// Run, as Table.Lookup does.
type Run struct {
	tables [RunLen]*Table
	lines  [RunLen]unsafe.Pointer
	// A walked lookup's probe (see Walk): the next slot to read, and the byte offset from its
	// table's first slot of the end of the lines asked for so far; 0 until Walk first sees it.
	next  [RunLen]uint64
	reach [RunLen]uint64
	// ended records that a walked lookup's probe ends at next (h's slot or an empty one).
	ended [RunLen]bool
}

// Set records key h, whose shard is s, as lookup i (below RunLen): the table s holds now, and the
// address of h's home slot in it. It reads s's table pointer with one atomic load and writes only
// r, which belongs to one goroutine.
func (r *Run) Set(i int, s *Shard, h uint64) {
	i &= RunLen - 1
	t := s.Table()
	r.tables[i], r.lines[i] = t, unsafe.Pointer(t.keyAt(t.home(h)))
	r.reach[i], r.ended[i] = 0, false
}

// PrefetchSpan starts loading, for each of the lookups from to to-1, the cache line of its home
// slot, and the next line too when the home slot starts in the second half of its line, and
// returns at once; it does nothing unless 0 <= from < to <= RunLen.
//
// At the tables' load a probe walks 3.5 to 4 slots from its home (BenchmarkProbeLines), so from
// the second half of a line it most often crosses into the next, and from the first half it most
// often does not. In AllowBatch on 1M uniform keys this measured 6 to 7% faster than always asking
// for the home line and the two after it; the home line alone was 5% slower, and always two or
// four lines the same as three (measured earlier). Most likely a run asks for more lines than the
// core keeps in flight, so each line asked for in vain delays one that is needed. On amd64 the
// lines are asked for to be written, as the decisions that follow will most likely write them:
// with two goroutines batching on one table, asking for them to be read left each swap a second
// trip to the other core (see prefetchWrite). Where the package has no prefetch
// instruction (see prefetchAll) it loads each home slot's word instead.
func (r *Run) PrefetchSpan(from, to int) {
	if from >= 0 && from < to && to <= RunLen {
		prefetchAll(&r.lines[from], to-from)
	}
}

// Walk goes on, for each lookup i from from to min(to, len(hs), RunLen)-1 (hs[i] its key), along
// its probe through the lines already asked for, and where the probe runs past them asks for the
// next 2*pairs lines (pairs <= 8). A lookup's first Walk starts at its home slot, whose lines
// PrefetchSpan asked for. It reads the lines, so a caller gives them time to arrive first:
// AllowBatch asks for a key's home lines 18 keys before its decision and walks it 12 and 6 keys
// before. Walk takes no lock, writes only r, and returns without waiting for the lines it asks
// for. A probe that would run past its table's last slot is walked no further ahead; Resume walks
// it to its end.
//
// Why: the probe of a key new to a table at its load (0.8 to 0.875) is long-tailed: a quarter to a
// third end in the home line, but 30 to 40% go on past the fourth line and 15 to 24% past the
// eighth (BenchmarkAbsentProbeLines). Asking for a fixed number of lines wastes memory bandwidth
// on the short probes and leaves each long one to wait for its further lines one after another;
// walking in stages asks for the lines that the walk so far shows are needed (bench/README.md,
// "A flood's probes, walked ahead in stages").
func (r *Run) Walk(hs []uint64, from, to, pairs int) {
	var ps [8]unsafe.Pointer // addresses for prefetchAll, each for two lines
	pairs = min(pairs, len(ps))
	n := 0
	to = min(to, len(hs), RunLen)
	for i := max(from, 0); i < to; i++ {
		if r.ended[i] {
			continue
		}
		t := r.tables[i]
		h := hs[i]
		j, reach := r.next[i], r.reach[i]
		if reach == 0 { // first walk: from home, through the lines PrefetchSpan asked for
			base, home := uintptr(t.slots), uintptr(r.lines[i])
			j = uint64(home-base) >> (t.slotShift & 63)
			// prefetchAll asked for the lines holding home and home+lineBytes/2.
			reach = uint64((home+lineBytes/2)|(lineBytes-1)) + 1 - uint64(base)
		}
		end := (reach + uint64(1)<<(t.slotShift&63) - 1) >> (t.slotShift & 63)
		for ; j < end && j < t.n; j++ {
			if k := satomic.LoadUint64(t.keyAt(j)); k == h || k == 0 {
				r.ended[i] = true
				break
			}
		}
		r.next[i] = j
		span := uint64(2 * lineBytes * pairs)
		if r.ended[i] || j >= t.n || reach+span > t.n<<(t.slotShift&63) {
			r.reach[i] = reach // no further lines: Resume walks the rest
			continue
		}
		for p := range pairs {
			ps[n] = unsafe.Add(t.slots, uintptr(reach)+uintptr(p)*2*lineBytes+lineBytes/2)
			if n++; n == len(ps) {
				prefetchAll(&ps[0], n)
				n = 0
			}
		}
		r.reach[i] = reach + span
	}
	if n > 0 {
		prefetchAll(&ps[0], n)
	}
}

// Resume is Lookup for a lookup that Walk has walked: it goes on from where the walk stopped
// instead of from the home slot. For one Walk never saw it is Lookup. Like Lookup, it takes no
// lock and writes nothing, so it may run while other goroutines insert into or rebuild the table.
func (r *Run) Resume(i int, h uint64) (t *Table, cell *uint64, free uint64) {
	i &= RunLen - 1
	if r.reach[i] == 0 {
		return r.Lookup(i, h)
	}
	t = r.tables[i]
	// Every slot before next held another key when Walk read it, and still does: a slot's key
	// never changes in a table's life.
	j, found := t.slotFrom(h, r.next[i]%t.n)
	if found {
		return t, t.cellOf(j), 0
	}
	return t, nil, j
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

// lineBytes is a cache line on the processors the package is tuned for.
const lineBytes = 64
