//go:build !linux

package batched

import "syscall"

// childAttr is nil where there is no parent-death signal: the test kills its children itself.
func childAttr() *syscall.SysProcAttr { return nil }
