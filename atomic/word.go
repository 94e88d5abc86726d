package atomic

import (
	satomic "sync/atomic"
	"unsafe"
)

// Flag bits in a cell's first word. Live policy states never set them.
const (
	Dead  uint64 = 1 << 63
	Moved uint64 = 1 << 62
	Flags        = Dead | Moved
)

// Status says whether an operation found its cell live: a plain value, safe to copy and to share
// between goroutines.
type Status uint8

const (
	// OK: the cell was live and the operation completed.
	OK Status = iota
	// IsDead: the cell's key was evicted; revive it under the shard lock and retry.
	IsDead
	// IsMoved: the cell was copied to a newer table; look the key up again.
	IsMoved
)

func statusOf(w0 uint64) Status {
	switch {
	case w0&Moved != 0:
		return IsMoved
	case w0&Dead != 0:
		return IsDead
	}
	return OK
}

// Load returns a cell's words; the second is 0 for one-word cells. Safe for concurrent use with
// every other function here on the same cell: both words are read as one.
func Load(c *uint64, words int) (w0, w1 uint64) {
	if words == 1 {
		return satomic.LoadUint64(c), 0
	}
	return load128(pair(c))
}

// Store writes a cell's words with no comparison. It is for cells not yet visible to other
// goroutines, or whose updates are excluded by the shard lock (reviving a dead cell).
func Store(c *uint64, words int, w0, w1 uint64) {
	if words == 1 {
		satomic.StoreUint64(c, w0)
		return
	}
	for {
		o0, o1 := load128(pair(c))
		if cas128(pair(c), o0, o1, w0, w1) {
			return
		}
	}
}

// CompareAndSwap replaces a cell's words (old0, old1) with (new0, new1) if they are unchanged, as
// one atomic step: safe for concurrent use on the same cell.
func CompareAndSwap(c *uint64, words int, old0, old1, new0, new1 uint64) bool {
	if words == 1 {
		return satomic.CompareAndSwapUint64(c, old0, new0)
	}
	return cas128(pair(c), old0, old1, new0, new1)
}

// Mark sets flag (Dead or Moved) on a live cell and returns the words it held before, or
// ok = false if the cell was already not live. A cell's state is preserved under the flag, so a
// cell marked Moved can be copied as it was at the instant of marking. Safe for concurrent use on
// the same cell: the mark is one compare-and-swap.
func Mark(c *uint64, words int, flag uint64) (w0, w1 uint64, ok bool) {
	for {
		w0, w1 = Load(c, words)
		if w0&Flags != 0 {
			return w0, w1, false
		}
		if CompareAndSwap(c, words, w0, w1, w0|flag, w1) {
			return w0, w1, true
		}
	}
}

// MarkIf sets flag on the cell only if it still holds (w0, w1): the evictor's step, which must not
// remove a state that changed since it was judged dead. Safe for concurrent use on the same cell.
func MarkIf(c *uint64, words int, w0, w1, flag uint64) bool {
	return CompareAndSwap(c, words, w0, w1, w0|flag, w1)
}

func pair(c *uint64) *[2]uint64 { return (*[2]uint64)(unsafe.Pointer(c)) }
