//go:build amd64 && !purego

package atomic

import (
	satomic "sync/atomic"

	"golang.org/x/sys/cpu"
)

// hasCAS128 is false only on the first x86-64 processors, which lack CMPXCHG16B.
var hasCAS128 = cpu.X86.HasCX16

//go:noescape
func cmpxchg16b(p *[2]uint64, old0, old1, new0, new1 uint64) bool

//go:noescape
func load16b(p *[2]uint64) (w0, w1 uint64)

// cas128 is CMPXCHG16B where the CPU has it, the striped lock elsewhere: chosen once, so that a
// compare-and-swap on the hot path is one call straight into the instruction's wrapper.
var cas128 = func() func(p *[2]uint64, old0, old1, new0, new1 uint64) bool {
	if hasCAS128 {
		return cmpxchg16b
	}
	return lockedCAS128
}()

func load128(p *[2]uint64) (uint64, uint64) {
	if !hasCAS128 {
		return lockedLoad128(p)
	}
	return load16b(p)
}

// loadRising reads a pair whose first word never returns to a value it held before (a window
// index that only moves forward, with flags that only ever change it) without a locked
// instruction: the second word, read between two equal readings of the first, belongs to that
// first word. Under contention this spares every attempt one cache-line-locking CMPXCHG16B.
func loadRising(p *[2]uint64) (uint64, uint64) {
	if !hasCAS128 {
		return lockedLoad128(p)
	}
	for {
		if w0, w1, ok := tryLoadRising(p); ok {
			return w0, w1
		}
	}
}

// tryLoadRising is one attempt of loadRising, small enough to inline into a hot path: three plain
// loads, ok when they read the pair consistently. Never ok where pairs are written under the
// lock, whose words are stored one by one.
func tryLoadRising(p *[2]uint64) (w0, w1 uint64, ok bool) {
	w0 = satomic.LoadUint64(&p[0])
	w1 = satomic.LoadUint64(&p[1])
	return w0, w1, hasCAS128 && satomic.LoadUint64(&p[0]) == w0
}
