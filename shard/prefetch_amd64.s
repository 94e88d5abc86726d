//go:build amd64 && !purego

#include "textflag.h"

// func prefetchAll(ps *unsafe.Pointer, n int)
//
// n >= 1. A prefetch never faults, so the lines past each address may lie beyond its table.
TEXT ·prefetchAll(SB), NOSPLIT, $0-16
	MOVQ ps+0(FP), BX
	MOVQ n+8(FP), CX
loop:
	MOVQ (BX), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	ADDQ $8, BX
	DECQ CX
	JNZ loop
	RET
