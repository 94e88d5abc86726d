//go:build 386 || arm || mips || mipsle

package engine

import "unsafe"

// memhash64 is memhash widened to 64 bits where a word has 32: two calls under the seed's two
// halves, as hash/maphash does, so that keys collide as rarely as on 64-bit platforms (one in
// 2^64 per pair, not one in 2^32); never 0 (see nonzero).
func memhash64(p unsafe.Pointer, seed uint64, n uintptr) uint64 {
	lo := memhash(p, uintptr(seed), n)
	hi := memhash(p, uintptr(seed>>32), n)
	return nonzero(uint64(hi)<<32 | uint64(lo))
}
