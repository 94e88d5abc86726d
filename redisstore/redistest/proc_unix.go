//go:build unix && !linux

package redistest

import (
	"os"
	"syscall"
)

// procAttr is nil: without Linux's parent-death signal, a test killed mid-run may leave its
// server running (Stop and the tests' cleanups end it otherwise).
func procAttr() *syscall.SysProcAttr { return nil }

// stop and cont pause and resume the server's process.
func stop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }
func cont(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
