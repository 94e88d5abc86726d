//go:build !(386 || arm || mips || mipsle)

package engine

import "unsafe"

// hashString hashes a string key to 64 bits. It inlines into every caller, leaving one call,
// through Limiter.hash straight into the hash function: a branch between two direct calls would
// not inline, and the extra call level costs about a dozen instructions a decision. noescape
// keeps key where the caller put it. The hash may be 0; the decision paths map it to 1 (see
// nonzero), which keeps this within the inlining budget.
func (l *Limiter) hashString(key string) uint64 {
	return uint64(l.hash(noescape(unsafe.Pointer(unsafe.StringData(key))), l.wordSeed, uintptr(len(key))))
}
