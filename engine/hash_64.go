//go:build !(386 || arm || mips || mipsle)

package engine

// hashOf returns a word-sized hash as the engine's 64-bit one, never 0 (see nonzero).
func hashOf(h uintptr) uint64 {
	if h == 0 {
		return 1
	}
	return uint64(h)
}
