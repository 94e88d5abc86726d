package engine

import (
	"fmt"
	"math"
	"runtime/debug"
	"sync/atomic"
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

// mappedNow returns the address space the process has mapped, or 0 where the platform does not
// tell it. A variable for tests, as machineMemory.
var mappedNow = addressSpaceInUse

// pointerSpace returns the address space a process can map at most where pointers have 32 bits:
// 3 GiB, what a 32-bit Linux kernel leaves to user space (a 32-bit process on a 64-bit kernel gets
// 4). 0 where pointers have 64 bits. A variable for tests, as machineMemory.
var pointerSpace = pointerSpace32

func pointerSpace32() uint64 {
	if ^uintptr(0)>>32 == 0 {
		return 3 << 30
	}
	return 0
}

// arenaSlack is address space kept free beside new tables under ulimit -v: the Go runtime maps
// its heap 64 MiB at a time, so tables that fill the limit to the byte would still fail.
const arenaSlack = 64 << 20

// presized is the memory that the tables of open limiters made with WithExpectedKeys took at New,
// in bytes: a process that builds several (one per rule, as the command's proxy and rls do) is
// judged on all of them, since each fitting alone does not make them fit together.
var presized atomic.Uint64

// reserveTableMemory counts need in presized, or refuses it, unchanged, when it and what presized
// holds cannot fit (see checkTableMemory). Counting first makes two News that race see each other.
func reserveTableMemory(expected int, need uint64) error {
	held := presized.Add(need) - need
	if err := checkTableMemory(expected, need, held); err != nil {
		releaseTableMemory(need)
		return err
	}
	return nil
}

// releaseTableMemory takes need, counted by reserveTableMemory, out of presized.
func releaseTableMemory(need uint64) { presized.Add(^(need - 1)) }

// checkTableMemory refuses tables (the memory WithExpectedKeys takes at New) that cannot fit,
// beside held (what other open limiters' tables took so): more than the Go memory limit
// (GOMEMLIMIT, or debug.SetMemoryLimit), than the process's address space has left (ulimit -v,
// less what is mapped already, and 64 MiB for the runtime's next heap arena: past it the
// allocation fails and the runtime ends the process; on a 32-bit platform, 3 GiB at most), than
// its control group allows (a container's memory limit, which the kernel enforces by killing the
// process), or than the machine's memory. Without it such a New does not fail: the allocation ends the process, an error
// no caller can handle. Tables that fit may still not leave room for the rest of the program;
// that judgement is the caller's.
func checkTableMemory(expected int, need, held uint64) error {
	total := need + held
	needs := fmt.Sprintf("engine: WithExpectedKeys(%d) needs %s of tables at New", expected, gib(need))
	if held > 0 {
		needs += fmt.Sprintf(" (%s with the %s other open limiters' WithExpectedKeys took)", gib(total), gib(held))
	}
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 && total > uint64(limit) {
		return fmt.Errorf("%s, more than the Go memory limit, %s (GOMEMLIMIT)", needs, gib(uint64(limit)))
	}
	// An address space binds everything mapped (the runtime's own gigabyte or so of reservations,
	// and the other limiters' tables, which held counts): the new tables must fit in what is left
	// of it. Past it the allocation fails, or on 32 bits a table's length overflows, and the
	// process ends.
	for _, space := range []struct {
		mem       uint64
		what, why string
	}{{pointerSpace(), "a 32-bit process's", ""}, {addressSpace(), "this process's", " (ulimit -v)"}} {
		if space.mem == 0 {
			continue // no such bound here
		}
		if used := mappedNow(); used+need+arenaSlack > space.mem {
			left := space.mem - min(used, space.mem)
			return fmt.Errorf("%s, more than %s address space has left, %s of %s%s", needs, space.what, gib(left), gib(space.mem), space.why)
		}
	}
	if mem := groupMemory(); mem > 0 && total > mem {
		return fmt.Errorf("%s, more than this process's control group allows, %s (its memory limit)", needs, gib(mem))
	}
	if mem := machineMemory(); mem > 0 && total > mem {
		return fmt.Errorf("%s, more than this machine's memory, %s", needs, gib(mem))
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
