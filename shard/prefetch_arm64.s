//go:build arm64 && !purego

#include "textflag.h"

// func prefetch(p unsafe.Pointer)
//
// A prefetch never faults, so the lines past p may lie beyond the table.
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVD p+0(FP), R0
	PRFM (R0), PLDL1KEEP
	PRFM 64(R0), PLDL1KEEP
	PRFM 128(R0), PLDL1KEEP
	RET
