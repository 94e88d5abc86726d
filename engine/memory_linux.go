package engine

import (
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
)

func systemMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

func cgroupMemory() uint64 { return cgroupLimit("/") }

// addressSpaceLimit returns the soft RLIMIT_AS (ulimit -v), or 0 for none.
func addressSpaceLimit() uint64 {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_AS, &r) != nil || r.Cur == ^uint64(0) {
		return 0
	}
	return r.Cur
}

// addressSpaceInUse returns the address space the process has mapped (VmSize), or 0 where it
// cannot be read. A Go program maps about a gigabyte before main runs, so a limit is judged
// against what it leaves.
func addressSpaceInUse() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	pages, _, _ := strings.Cut(string(b), " ")
	n, err := strconv.ParseUint(pages, 10, 64)
	if err != nil {
		return 0
	}
	return n * uint64(os.Getpagesize())
}

// cgroupLimit returns the smallest memory limit set on the control groups this process is in,
// or 0 where none is: cgroup v2's memory.max and v1's memory.limit_in_bytes, on the process's
// group and each group above it, since a parent's limit binds its children. root is "/" but for
// tests. Inside a container the group's path often names the host's hierarchy while the mount
// shows the container's own group at its root; walking up to the root reads that one too.
func cgroupLimit(root string) uint64 {
	data, err := os.ReadFile(path.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0
	}
	var limit uint64
	read := func(file string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2) fails to parse; v1 writes "no limit" as a page-rounded 2^63-1.
		if err != nil || v >= 1<<62 {
			return
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	for _, line := range strings.Split(string(data), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		controllers, group, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(group, "/") {
			continue
		}
		var dir, file string
		switch {
		case id == "0" && controllers == "":
			dir, file = "sys/fs/cgroup", "memory.max"
		case hasController(controllers, "memory"):
			dir, file = "sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		for g := path.Clean(group); ; g = path.Dir(g) {
			read(path.Join(root, dir, g, file))
			if g == "/" {
				break
			}
		}
	}
	return limit
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
