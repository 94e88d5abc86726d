//go:build !amd64 || purego

package atomic

func cas128(p *[2]uint64, old0, old1, new0, new1 uint64) bool {
	return lockedCAS128(p, old0, old1, new0, new1)
}

func load128(p *[2]uint64) (uint64, uint64) { return lockedLoad128(p) }

// loadRising is load128 where pairs are updated under a lock: their words are not written
// atomically one by one, so only the lock gives a consistent reading.
func loadRising(p *[2]uint64) (uint64, uint64) { return lockedLoad128(p) }

// tryLoadRising never succeeds: the lock writes a pair's words one by one, so plain loads may tear.
func tryLoadRising(*[2]uint64) (w0, w1 uint64, ok bool) { return 0, 0, false }
