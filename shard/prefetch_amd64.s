//go:build amd64 && !purego

#include "textflag.h"

// func prefetchAll(ps *unsafe.Pointer, n int)
//
// n >= 1. For each address p, the line holding p and the line holding p+32: the next line only when
// p lies in the second half of its line (see Run.Prefetch). A prefetch never faults, so p+32 may
// lie beyond its table.
TEXT ·prefetchAll(SB), NOSPLIT, $0-16
	MOVQ ps+0(FP), BX
	MOVQ n+8(FP), CX
loop:
	MOVQ (BX), AX
	PREFETCHT0 (AX)
	PREFETCHT0 32(AX)
	ADDQ $8, BX
	DECQ CX
	JNZ loop
	RET
