// Package shard is the engine's table of packed cells: a power-of-two array of cache-line-padded
// shards, each an open-addressing hash table keyed by the 64-bit key hash.
//
// It is a building block of package engine, which is its one user; a program that limits rates
// uses engine, and nothing here is needed for that.
//
// Reads take no lock: a lookup loads the shard's table pointer and probes it with atomic loads.
// Inserts, rebuilds (to grow, shrink, or drop evicted keys) and full sweeps take the shard's
// mutex. A slot, once given a key in a table, belongs to that key for the table's life: eviction
// only marks the key's cell Dead (so a concurrent updater cannot write into an orphan), and only a
// rebuild, which marks every cell Moved before copying it, frees the slot. That is why a lock-free
// reader can never see one key's slot reused for another.
//
// A key is its 64-bit hash, which must not be 0: 0 marks an empty slot, so every method that takes
// a key hash h (Acquire and its variants, Find, Lookup, Run.Set) requires h != 0, and given 0
// takes an empty slot for the key's. The engine maps a hash of 0 to another.
package shard

import (
	"fmt"
	"math/bits"
	satomic "sync/atomic"
	"unsafe"
)

// Table is one shard's open-addressing table. Slots are [key, cell...] laid out in one []uint64:
// a one-word cell makes a 16-byte slot, a two-word cell a 32-byte slot whose cell is 16-byte
// aligned. Key 0 marks an empty slot (the engine never uses hash 0). Probing is linear from a
// home slot found by multiplying the hash into [0, n), so n need not be a power of two and the
// table can be sized to hold its keys at a steady load (between 0.8 and 0.875).
//
// Any number of goroutines may read a Table at once, without a lock (Find, Lookup, Cell); only the
// goroutine holding its Shard's mutex writes it, and a table that a rebuild has replaced is never
// written again (see the package comment).
type Table struct {
	// slots points at slot 0; slot i is at slots + i<<slotShift, its cell cellOff bytes further.
	// Addressing by pointer keeps bounds checks off the lookup, which every decision makes; i < n
	// holds wherever a slot is addressed, because home maps into [0, n) and probes wrap at n.
	slots     unsafe.Pointer
	n         uint64
	slotShift uint
	cellOff   uintptr
	shift     uint
	words     []uint64 // the memory behind slots
}

// MinSlots is the size of an empty shard's table, and the smallest a rebuild makes, when
// Config.ExpectedKeys is 0 (see Config.MinTable).
const MinSlots = minSlots

const (
	minSlots = 8
	// Rebuild when more than 7/8 of the slots hold keys; size a rebuild for 4/5, so that the load
	// stays between 0.8 and 0.875 (18.3 to 20 bytes per key in 16-byte slots). Each key is copied
	// about 11 times over a table's growth: the price of the memory figure.
	loadNum, loadDen     = 7, 8
	targetNum, targetDen = 4, 5
	capNum, capDen       = 7, 10
)

func newTable(n uint64, cellWords int, shift uint) *Table {
	n = max(n, minSlots)
	slotShift, cellOff := uint(4), uintptr(8)
	if cellWords == 2 {
		slotShift, cellOff = 5, 16
	}
	words := make([]uint64, tableBytes(n, cellWords)/8)
	base := 0
	if uintptr(unsafe.Pointer(&words[0]))&15 != 0 {
		base = 1 // two-word cells need 16-byte alignment for CMPXCHG16B
	}
	return &Table{slots: unsafe.Pointer(&words[base]), n: n, slotShift: slotShift, cellOff: cellOff, shift: shift, words: words}
}

// tableBytes returns the memory of a table of n slots: 16-byte slots for one-word cells, 32-byte
// ones for two-word cells (padded, so that the cell is 16-byte aligned), and one word of slack
// for that alignment.
func tableBytes(n uint64, cellWords int) uint64 {
	stride := uint64(2)
	if cellWords == 2 {
		stride = 4
	}
	return (n*stride + 1) * 8
}

// sizeFor returns the slot count that holds keys at the target load.
func sizeFor(keys uint64) uint64 { return keys*targetDen/targetNum + 1 }

// sizeAtCap is sizeFor for a limiter at its key cap, where every new key replaces an evicted one:
// a load of 0.7, so that a quarter of the keys can be replaced before the next rebuild (at 7/8)
// instead of a tenth. A rebuild copies every live key, so this cuts the copies per new key from
// about 11 to about 4, for 14% more table memory while the cap holds.
func sizeAtCap(keys uint64) uint64 { return keys*capDen/capNum + 1 }

// Slots returns the number of slots. Fixed for the table's life: safe for concurrent use, without a
// lock.
func (t *Table) Slots() uint64 { return t.n }

// Bytes returns the memory held by the table's slots. Fixed for the table's life: safe for
// concurrent use, without a lock.
func (t *Table) Bytes() uint64 { return uint64(len(t.words)) * 8 }

func (t *Table) keyAt(i uint64) *uint64 { return (*uint64)(unsafe.Add(t.slots, i<<(t.slotShift&63))) }
func (t *Table) cellOf(i uint64) *uint64 {
	return (*uint64)(unsafe.Add(t.slots, uintptr(i<<(t.slotShift&63))+t.cellOff))
}

// home maps h to a slot. The shard index took h's top bits, so they are shifted out first.
func (t *Table) home(h uint64) uint64 {
	hi, _ := bits.Mul64(h<<(t.shift&63), t.n)
	return hi
}

// Find returns the cell of key h, or nil. It takes no lock and writes nothing. It inlines into
// its caller, which then makes one call, to Lookup.
func (t *Table) Find(h uint64) *uint64 {
	c, _ := t.Lookup(h)
	return c
}

// nearSlots is how many slots from a key's home Lookup looks at before it probes: at the
// tables' load (0.8 to 0.875) about 84% of keys lie within 4 slots of their home
// (BenchmarkProbeLines reports the share as near-share).
const nearSlots = 4

// Lookup is Find that also returns, when h is absent, the empty slot its probe stopped at, for
// Shard.AcquireFrom: while t stays the shard's table that slot is where h would go, or the slot
// a racing insert filled (slots never empty again in a table's life). It takes no lock and
// writes nothing.
//
// It first loads the nearSlots slots from h's home and picks h's among them with conditional
// moves, so that the one branch that follows, found or not, is nearly always predicted; only a key
// further away (or near slots that would wrap past the last slot) is probed for slot by slot, from
// the first slot past the near ones when they all hold other keys (as they do for most new keys:
// it spares each insert about 30 instructions of walking them again).
//
// Why: a probe loop branches on each key it loads, and how far a key lies from its home is random,
// so the loop's exit is mispredicted on most lookups. While such an exit waits on a cache miss the
// processor goes on around the loop, not on to the next decision, whose loads then start only once
// the miss is served: each lookup pays much of its miss alone (BenchmarkMissesInFlight, part=probe).
// Without it, consecutive decisions overlap their misses more, as the floor's atomic adds do
// (BenchmarkFindNear).
//
// A match anywhere among the near slots is h's own: a key is in a table at most once, and its slot
// is never reused in the table's life, even one past an empty slot that a probe would stop at.
func (t *Table) Lookup(h uint64) (cell *uint64, free uint64) {
	i := t.home(h)
	if i <= t.n-nearSlots { // t.n >= minSlots > nearSlots
		p := unsafe.Pointer(t.keyAt(i))
		s, c := uintptr(1)<<(t.slotShift&63), t.cellOff
		// Offsets worked out before the compares, so that each pick compiles to a conditional move.
		c1, c2, c3 := s+c, 2*s+c, 3*s+c
		k0 := satomic.LoadUint64((*uint64)(p))
		k1 := satomic.LoadUint64((*uint64)(unsafe.Add(p, s)))
		k2 := satomic.LoadUint64((*uint64)(unsafe.Add(p, 2*s)))
		k3 := satomic.LoadUint64((*uint64)(unsafe.Add(p, 3*s)))
		off := uintptr(0) // no match: a cell is never at offset 0
		if k3 == h {
			off = c3
		}
		if k2 == h {
			off = c2
		}
		if k1 == h {
			off = c1
		}
		if k0 == h {
			off = c
		}
		if off != 0 {
			return (*uint64)(unsafe.Add(p, off)), 0
		}
		if k0 != 0 && k1 != 0 && k2 != 0 && k3 != 0 {
			// Four other keys: the probe goes on past them (as a new key's does, most often).
			if i += nearSlots; i == t.n {
				i = 0
			}
		}
	}
	for {
		p := t.keyAt(i)
		if k := satomic.LoadUint64(p); k == h {
			return (*uint64)(unsafe.Add(unsafe.Pointer(p), t.cellOff)), 0
		} else if k == 0 {
			return nil, i
		}
		if i++; i == t.n {
			i = 0
		}
	}
}

// slot returns h's slot, or the empty slot where it would go.
func (t *Table) slot(h uint64) (uint64, bool) { return t.slotFrom(h, t.home(h)) }

// slotFrom is slot with its probe started at i, which must be h's home or a slot on h's probe
// sequence every slot before which (from the home) holds a key other than h.
func (t *Table) slotFrom(h, i uint64) (uint64, bool) {
	for {
		k := satomic.LoadUint64(t.keyAt(i))
		if k == h {
			return i, true
		}
		if k == 0 {
			return i, false
		}
		if i++; i == t.n {
			i = 0
		}
	}
}

// put stores a key and its cell in an empty slot: the cell first, so that a reader who sees the
// key sees its state. The cell's stores are plain: until the key's atomic store publishes it, no
// other goroutine reaches the cell (every reader, lock-free sweep and evictor loads the key first,
// and skips an empty slot; a sweep under the shard's mutex, which the inserter holds, may read an
// empty slot's cell: see nextSuspectLocked), and that store orders them before any reader's load
// of the key. An atomic store
// is a locked instruction on amd64 (a CMPXCHG16B loop for a two-word cell), which every insert
// would otherwise pay once more.
func (t *Table) put(i, h uint64, words int, w0, w1 uint64) {
	t.writeCell(i, words, w0, w1)
	satomic.StoreUint64(t.keyAt(i), h)
}

// writeCell stores slot i's cell with plain stores, for a cell no other goroutine can reach yet.
func (t *Table) writeCell(i uint64, words int, w0, w1 uint64) {
	c := t.cellOf(i)
	*c = w0
	if words == 2 {
		*(*uint64)(unsafe.Add(unsafe.Pointer(c), 8)) = w1
	}
}

// filler fills a table no other goroutine can reach yet (a rebuild's, before the shard publishes
// it) with plain loads and stores: the publication's atomic store orders them before any reader's
// first load of the table. An atomic store is a full barrier on most processors (XCHG on amd64;
// for a two-word cell, a CMPXCHG16B loop), which a rebuild would otherwise pay per key it copies.
//
// A rebuild copies keys mostly in the order of their home slots, and for a key that comes in that
// order the filler knows its slot without probing: it keeps top, the highest home filled in order
// so far, and end, one past the highest slot written, with every slot in [top, end) full. A key
// whose home is at least top goes to its home if that is at or past end (nothing is written there
// yet), else to end; any other key (or one that would go past the last slot) probes as usual.
type filler struct {
	t        *Table
	words    int
	top, end uint64
}

func (t *Table) filler(words int) filler { return filler{t: t, words: words} }

// fill stores key h, absent from the table, and its cell.
func (f *filler) fill(h, w0, w1 uint64) {
	t := f.t
	hm := t.home(h)
	var i uint64
	switch {
	case hm >= f.top && hm >= f.end:
		i = hm
	case hm >= f.top && f.end < t.n:
		i = f.end
	default:
		for i = hm; *t.keyAt(i) != 0; {
			if i++; i == t.n {
				i = 0
			}
		}
	}
	if hm >= f.top {
		f.top = hm
	}
	// A probe wraps only once every slot from its home to the last is full, so end is then n
	// already: a wrapped write (i < hm) leaves every written slot below end, as a key past end
	// going to its home needs.
	if i >= hm && i >= f.end {
		f.end = i + 1
	}
	t.writeCell(i, f.words, w0, w1)
	*t.keyAt(i) = h
}

// Cell returns slot i's key (0 if empty) and cell, for iteration over [0, Slots()). It panics
// for any other i: the slots are addressed without Go's bounds checks. It takes no lock and may run
// while the shard's lock holder inserts keys: the key is read atomically, and the cell must be read
// with package atomic's functions.
func (t *Table) Cell(i uint64) (key uint64, cell *uint64) {
	if i >= t.n {
		panic(cellRange{i, t.n})
	}
	return t.at(i)
}

// at is Cell for the package's own loops, whose bounds keep i below t.n: unchecked, so that
// it inlines into them (Cell's check and panic put it past the inlining budget, and a sweep of a
// table took 2.7 times as long).
func (t *Table) at(i uint64) (key uint64, cell *uint64) {
	return satomic.LoadUint64(t.keyAt(i)), t.cellOf(i)
}

// cellRange is Cell's panic: an error whose text is built only when it is read.
type cellRange struct{ i, n uint64 }

func (e cellRange) Error() string {
	return fmt.Sprintf("shard: Cell(%d) of a table of %d slots", e.i, e.n)
}

// nextSuspectLocked returns the first slot in [i, to) (to <= t.n) that holds a key whose state w0
// does not match the live pattern (w0&mask is neither a nor b: see livePattern), or to. It reads
// every slot's cell, empty or not, without a branch on whether the slot is empty, so its caller
// must hold the shard's mutex: an insert writes a new key's cell with plain stores before it
// publishes the key (see Table.put), and only the mutex keeps that from racing with the read.
//
// Why: at the tables' load (0.7 at the key cap to 0.875) a third to an eighth of the slots are
// empty, at random, so a branch on the key is mispredicted many times in each bounded reclaim.
// Folding the empty test into the pattern's leaves one branch a slot, taken only for a suspect,
// which in a flood of new keys at the key cap (every key live) is never: a bounded reclaim over
// live keys took 28% less time (BenchmarkReclaim; bench/README.md, "Key floods at the cap: the
// bounded reclaim"). The background sweeper, which takes no lock, keeps the branch.
func (t *Table) nextSuspectLocked(i, to uint64, mask, a, b uint64) uint64 {
	base, shift, cellOff := t.slots, t.slotShift&63, t.cellOff
	for ; i < to; i++ {
		p := unsafe.Add(base, uintptr(i<<shift))
		k := satomic.LoadUint64((*uint64)(p))
		m := satomic.LoadUint64((*uint64)(unsafe.Add(p, cellOff))) & mask
		if b2u(k != 0)&b2u(m != a)&b2u(m != b) != 0 {
			return i
		}
	}
	return to
}

// b2u is 1 for true and 0 for false; it compiles to a flag set, not a branch.
func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
