//go:build linux && amd64 && !purego

package shard

import (
	"bufio"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestPrefetchWriteDetected checks the CPUID test against the kernel's own reading of the same
// bit, the "3dnowprefetch" flag of /proc/cpuinfo, where there is one.
func TestPrefetchWriteDetected(t *testing.T) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo:", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) != "flags" {
			continue
		}
		has := false
		for _, fl := range strings.Fields(value) {
			has = has || fl == "3dnowprefetch"
		}
		require.Equal(t, has, prefetchWrite, "PREFETCHW detected by CPUID, against /proc/cpuinfo")
		return
	}
	require.NoError(t, sc.Err())
	t.Skip("no flags line in /proc/cpuinfo")
}

// TestPrefetchBothWays runs both of prefetchAll's loops over addresses at the end of a page
// whose next page may not be read or written: the second line each asks for lies there, and a
// prefetch must not fault. Neither loop may write.
func TestPrefetchBothWays(t *testing.T) {
	saved := prefetchWrite
	t.Cleanup(func() { prefetchWrite = saved })
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, syscall.Munmap(mem)) })
	require.NoError(t, syscall.Mprotect(mem[page:], syscall.PROT_NONE))
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), page/8)
	for i := range words {
		words[i] = uint64(i)
	}
	var ps [RunLen]unsafe.Pointer
	for i := range ps {
		ps[i] = unsafe.Pointer(&words[len(words)-1-i]) // the last 16 words: p+32 is past the page for 4
	}
	// The guard holds: a load where the prefetches reach faults.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	require.Panics(t, func() { faultSink = *(*uint64)(unsafe.Add(ps[0], 32)) })
	for _, w := range []bool{false, true} {
		prefetchWrite = w
		prefetchAll(&ps[0], RunLen)
		prefetchAll(&ps[0], 1)
	}
	for i := range words {
		require.Equal(t, uint64(i), words[i])
	}
}

var faultSink uint64
