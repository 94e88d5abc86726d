//go:build !unix

package redistest

import (
	"errors"
	"os"
	"syscall"
)

// procAttr is nil: without Linux's parent-death signal, a test killed mid-run may leave its
// server running (Stop and the tests' cleanups end it otherwise).
func procAttr() *syscall.SysProcAttr { return nil }

var errNoStop = errors.New("redistest: pausing a process needs SIGSTOP, which this platform does not have")

// stop and cont fail: the platform cannot pause a process.
func stop(*os.Process) error { return errNoStop }
func cont(*os.Process) error { return errNoStop }
