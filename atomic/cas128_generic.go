//go:build !amd64 || purego

package atomic

func cas128(p *[2]uint64, old0, old1, new0, new1 uint64) bool {
	return lockedCAS128(p, old0, old1, new0, new1)
}

func load128(p *[2]uint64) (uint64, uint64) { return lockedLoad128(p) }
