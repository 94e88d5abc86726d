//go:build (!amd64 && !arm64) || purego

package shard

import (
	satomic "sync/atomic"
	"unsafe"
)

// prefetchAll loads the word at each of the n addresses from ps, where the package has no prefetch
// instruction. A load, unlike a prefetch, holds up the instructions after it until its line
// arrives, so it overlaps only with the loads issued close after it; an atomic load is never
// dropped as dead code.
func prefetchAll(ps *unsafe.Pointer, n int) {
	for _, p := range unsafe.Slice(ps, n) {
		satomic.LoadUint64((*uint64)(p))
	}
}
