//go:build 386 || arm || mips || mipsle

package engine

// hashOf spreads a 32-bit hash over 64 bits, so that the top bits, which choose the shard,
// vary; never 0 (see nonzero).
func hashOf(h uintptr) uint64 { return nonzero(fmix(uint64(h))) }
