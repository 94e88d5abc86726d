package batched

import "syscall"

// childAttr makes a child process die with the test process, so that a test killed mid-run
// leaves no child behind (Linux's parent-death signal).
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
