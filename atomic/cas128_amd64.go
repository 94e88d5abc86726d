//go:build amd64 && !purego

package atomic

import "golang.org/x/sys/cpu"

// hasCAS128 is false only on the first x86-64 processors, which lack CMPXCHG16B.
var hasCAS128 = cpu.X86.HasCX16

//go:noescape
func cmpxchg16b(p *[2]uint64, old0, old1, new0, new1 uint64) bool

//go:noescape
func load16b(p *[2]uint64) (w0, w1 uint64)

func cas128(p *[2]uint64, old0, old1, new0, new1 uint64) bool {
	if !hasCAS128 {
		return lockedCAS128(p, old0, old1, new0, new1)
	}
	return cmpxchg16b(p, old0, old1, new0, new1)
}

func load128(p *[2]uint64) (uint64, uint64) {
	if !hasCAS128 {
		return lockedLoad128(p)
	}
	return load16b(p)
}
