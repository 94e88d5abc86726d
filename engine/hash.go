package engine

import (
	"unsafe"
)

// memhash is the runtime's hash of memory, the one behind hash/maphash and Go's maps: AES-based
// with a per-process random key where the CPU has AES instructions, a seeded wyhash where it has
// not. hash/maphash.String reaches it through three calls that only forward their arguments; on a
// short key those calls cost a third of the hash (BenchmarkHash), so the engine calls it directly.
// The runtime keeps this symbol reachable by linkname for the packages that do the same.
//
//go:noescape
//go:linkname memhash runtime.memhash
func memhash(p unsafe.Pointer, seed, n uintptr) uintptr
