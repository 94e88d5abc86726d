//go:build amd64 && !purego

#include "textflag.h"

// func prefetchAll(ps *unsafe.Pointer, n int)
//
// n >= 1. For each address p, the line holding p and the line holding p+32: the next line only when
// p lies in the second half of its line (see Run.Prefetch). A prefetch never faults, so p+32 may
// lie beyond its table. Where the processor has PREFETCHW (prefetchWrite), the lines are asked for
// to be written, else to be read.
TEXT ·prefetchAll(SB), NOSPLIT, $0-16
	MOVQ ps+0(FP), BX
	MOVQ n+8(FP), CX
	CMPB ·prefetchWrite(SB), $0
	JEQ  read

write:
	MOVQ (BX), AX
	// PREFETCHW (AX) and PREFETCHW 32(AX) (0F 0D /1), which the assembler does not know by name.
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08
	BYTE $0x0f; BYTE $0x0d; BYTE $0x48; BYTE $0x20
	ADDQ $8, BX
	DECQ CX
	JNZ  write
	RET

read:
	MOVQ (BX), AX
	PREFETCHT0 (AX)
	PREFETCHT0 32(AX)
	ADDQ $8, BX
	DECQ CX
	JNZ  read
	RET

// func extFeatures() uint32
//
// CPUID leaf 0x80000001's ECX, or 0 where the processor has no such leaf.
TEXT ·extFeatures(SB), NOSPLIT, $0-4
	MOVL $0x80000000, AX
	XORL CX, CX
	CPUID
	CMPL AX, $0x80000001
	JB   none
	MOVL $0x80000001, AX
	XORL CX, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET

none:
	MOVL $0, ret+0(FP)
	RET
