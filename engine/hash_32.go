//go:build 386 || arm || mips || mipsle

package engine

import "unsafe"

// hashString hashes a string key to 64 bits where a word has 32: a word-sized hash would merge
// distinct keys once in 2^32 pairs (about a dozen of 300,000 keys). Neither hash retains key.
func (l *Limiter) hashString(key string) uint64 {
	if l.seeded {
		return seededHash(key, l.mix[0])
	}
	return memhash64(unsafe.Pointer(unsafe.StringData(key)), l.hashSeed, uintptr(len(key)))
}

// memhash64 is memhash widened to 64 bits: two calls under the seed's two halves, as hash/maphash
// does; never 0 (see nonzero).
func memhash64(p unsafe.Pointer, seed uint64, n uintptr) uint64 {
	lo := memhash(p, uintptr(seed), n)
	hi := memhash(p, uintptr(seed>>32), n)
	return nonzero(uint64(hi)<<32 | uint64(lo))
}
