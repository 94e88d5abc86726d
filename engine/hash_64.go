//go:build !(386 || arm || mips || mipsle)

package engine

import "unsafe"

// memhash64 is memhash, whose result is already 64 bits wide; never 0 (see nonzero).
func memhash64(p unsafe.Pointer, seed uint64, n uintptr) uint64 {
	h := uint64(memhash(p, uintptr(seed), n))
	if h == 0 {
		return 1
	}
	return h
}
