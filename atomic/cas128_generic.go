//go:build !amd64 || purego

package atomic

func cas128(p *[2]uint64, old0, old1, new0, new1 uint64) bool {
	return lockedCAS128(p, old0, old1, new0, new1)
}

func load128(p *[2]uint64) (uint64, uint64) { return lockedLoad128(p) }

// loadRising is load128 where pairs are updated under a lock: their words are not written
// atomically one by one, so only the lock gives a consistent reading.
func loadRising(p *[2]uint64) (uint64, uint64) { return lockedLoad128(p) }

// risingOK is false: the lock writes a pair's words one by one, so plain loads may tear.
const risingOK = false
