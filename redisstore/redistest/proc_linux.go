package redistest

import (
	"os"
	"syscall"
)

// procAttr makes the server die with the test process that started it (Linux's parent-death
// signal), so that a test killed mid-run leaves no server behind.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

// stop and cont pause and resume the server's process.
func stop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }
func cont(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
