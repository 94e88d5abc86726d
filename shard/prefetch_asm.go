//go:build (amd64 || arm64) && !purego

package shard

import "unsafe"

// prefetchAll asks the processor for the cache line at each of the n addresses from ps, and for
// the next line when the address lies in the second half of its line, and returns at once: unlike a load, a prefetch does not hold up the
// instructions after it while the line is on its way, so a caller can issue it hundreds of
// instructions before it needs the line. One call for the whole run, because a call per address
// cost more than the prefetches: AllowBatch on Zipf keys, whose hot keys stay cached, measured 15%
// faster with one call.
//
//go:noescape
func prefetchAll(ps *unsafe.Pointer, n int)
