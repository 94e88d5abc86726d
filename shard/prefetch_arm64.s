//go:build arm64 && !purego

#include "textflag.h"

// func prefetchAll(ps *unsafe.Pointer, n int): prefetch_amd64.s's loop, with PRFM.
TEXT ·prefetchAll(SB), NOSPLIT, $0-16
	MOVD ps+0(FP), R1
	MOVD n+8(FP), R2
loop:
	MOVD.P 8(R1), R0
	PRFM (R0), PLDL1KEEP
	PRFM 32(R0), PLDL1KEEP
	SUBS $1, R2, R2
	BNE loop
	RET
