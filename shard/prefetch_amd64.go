//go:build amd64 && !purego

package shard

// prefetchWrite reports whether the processor has PREFETCHW (CPUID 0x80000001, ECX bit 8, which
// Linux lists as the 3dnowprefetch flag), with which prefetchAll asks for lines to be written
// rather than read. Every line a batch asks for holds a cell its decision will most likely write
// with a compare-and-swap. A line asked for to be read comes in shared when another core holds
// it, and the swap must then ask that core for it a second time: with that second trip, two
// goroutines batching on one table decided fewer keys per second than one (bench/README.md,
// "Batches on more than one core"). Set once, at package initialisation, and only read after.
var prefetchWrite = extFeatures()&(1<<8) != 0

// extFeatures returns CPUID leaf 0x80000001's ECX, or 0 where there is no such leaf.
func extFeatures() uint32
