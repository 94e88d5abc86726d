//go:build amd64 && !purego

#include "textflag.h"

// func cmpxchg16b(p *[2]uint64, old0, old1, new0, new1 uint64) bool
TEXT ·cmpxchg16b(SB), NOSPLIT, $0-41
	MOVQ p+0(FP), DI
	MOVQ old0+8(FP), AX
	MOVQ old1+16(FP), DX
	MOVQ new0+24(FP), BX
	MOVQ new1+32(FP), CX
	LOCK
	CMPXCHG16B (DI)
	SETEQ ret+40(FP)
	RET

// func load16b(p *[2]uint64) (w0, w1 uint64)
// An atomic 16-byte read: compare with zero and "replace" with zero, which writes back what was
// there (or zero over zero) and returns the current value in DX:AX either way.
TEXT ·load16b(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), DI
	XORQ AX, AX
	XORQ DX, DX
	XORQ BX, BX
	XORQ CX, CX
	LOCK
	CMPXCHG16B (DI)
	MOVQ AX, w0+8(FP)
	MOVQ DX, w1+16(FP)
	RET
