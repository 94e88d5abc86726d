//go:build amd64 && !purego

#include "textflag.h"

// func prefetch(p unsafe.Pointer)
//
// A prefetch never faults, so the lines past p may lie beyond the table.
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	RET
