//go:build (amd64 || arm64) && !purego

package shard

import "unsafe"

// prefetchAll asks the processor for the cache line at each of the n addresses from ps, and for
// the next line when the address lies in the second half of its line, and returns at once. On
// amd64 it asks for them to be written where the processor can (see prefetchWrite); arm64 asks
// for them to be read, not yet measured the other way. Unlike
// a load, a prefetch does not hold up the instructions after it while the line is on its way, so a
// caller can issue it hundreds of instructions before it needs the line. One call for the whole
// run: with a call per address, and each home slot worked out twice, AllowBatch on Zipf keys
// (whose hot keys stay cached, so that its own work shows) took 18% longer per key.
//
//go:noescape
func prefetchAll(ps *unsafe.Pointer, n int)
