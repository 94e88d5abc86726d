//go:build (amd64 || arm64) && !purego

package shard

import "unsafe"

// prefetch asks the processor for the cache line at p and the two after it, and returns at once:
// unlike a load, a prefetch does not hold up the instructions after it while the line is on its
// way, so a caller can issue it hundreds of instructions before it needs the line.
//
//go:noescape
func prefetch(p unsafe.Pointer)
