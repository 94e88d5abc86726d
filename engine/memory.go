package engine

import (
	"fmt"
	"math"
	"runtime/debug"
)

// machineMemory returns the machine's memory in bytes, or 0 where the platform does not tell it.
// A variable, so that a test can stand in a small machine.
var machineMemory = systemMemory

// groupMemory returns the memory limit of the process's control group (a container's limit), or
// 0 where none is set or the platform has none. A variable for tests, as machineMemory.
var groupMemory = cgroupMemory

// addressSpace returns the process's address-space limit (ulimit -v), or 0 where none is set or
// the platform has none. A variable for tests, as machineMemory.
var addressSpace = addressSpaceLimit

// checkTableMemory refuses tables (the memory WithExpectedKeys takes at New) that cannot fit: more
// than the Go memory limit (GOMEMLIMIT, or debug.SetMemoryLimit), than the process's address
// space may hold (ulimit -v, where the allocation fails and the runtime ends the process), than
// its control group allows (a container's memory limit, which the kernel enforces by killing the process),
// or than the machine's memory.
// Without it such a New does not fail: the allocation ends the process, an error no caller can
// handle. Tables that fit may still not leave room for the rest of the program; that judgement
// is the caller's.
func checkTableMemory(expected int, need uint64) error {
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 && need > uint64(limit) {
		return fmt.Errorf("engine: WithExpectedKeys(%d) needs %s of tables at New, more than the Go memory limit, %s (GOMEMLIMIT)", expected, gib(need), gib(uint64(limit)))
	}
	if mem := addressSpace(); mem > 0 && need > mem {
		return fmt.Errorf("engine: WithExpectedKeys(%d) needs %s of tables at New, more than this process's address space may hold, %s (ulimit -v)", expected, gib(need), gib(mem))
	}
	if mem := groupMemory(); mem > 0 && need > mem {
		return fmt.Errorf("engine: WithExpectedKeys(%d) needs %s of tables at New, more than this process's control group allows, %s (its memory limit)", expected, gib(need), gib(mem))
	}
	if mem := machineMemory(); mem > 0 && need > mem {
		return fmt.Errorf("engine: WithExpectedKeys(%d) needs %s of tables at New, more than this machine's memory, %s", expected, gib(need), gib(mem))
	}
	return nil
}

// gib writes b in GiB, or in whole MiB (rounded up) below 1 GiB.
func gib(b uint64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%d MiB", (b+1<<20-1)>>20)
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}
