package atomic

import (
	"sync"
	satomic "sync/atomic"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Where no 16-byte compare-and-swap instruction is used, a two-word cell is guarded by one of a
// fixed set of striped mutexes chosen by its address. Every write of a pair, and every read that
// needs both words, goes through cas128/load128, so the stripe orders them; a read of the first
// word alone (the sweep's filters) is an atomic load, and so is each store here.
type stripe struct {
	mu sync.Mutex
	_  cpu.CacheLinePad
}

var stripes [64]stripe

func stripeOf(p *[2]uint64) *sync.Mutex {
	a := uintptr(unsafe.Pointer(p)) >> 4
	return &stripes[(a^a>>6^a>>12)%uintptr(len(stripes))].mu
}

func lockedCAS128(p *[2]uint64, old0, old1, new0, new1 uint64) bool {
	mu := stripeOf(p)
	mu.Lock()
	defer mu.Unlock()
	if p[0] != old0 || p[1] != old1 {
		return false
	}
	// Atomic stores, though the lock orders every writer: the sweep's filters read a cell's first
	// word with an atomic load and no lock (a hint only, checked again under the lock), which a
	// plain store would race with, and on 32-bit platforms could tear.
	satomic.StoreUint64(&p[0], new0)
	satomic.StoreUint64(&p[1], new1)
	return true
}

func lockedLoad128(p *[2]uint64) (uint64, uint64) {
	mu := stripeOf(p)
	mu.Lock()
	defer mu.Unlock()
	return p[0], p[1]
}
