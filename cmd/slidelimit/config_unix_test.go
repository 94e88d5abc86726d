//go:build unix

package main

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A -config path that is not a regular file is refused at start, naming it: a FIFO blocked the
// read (and, with it, the stop signals), and /dev/zero took the process's memory.
func TestProxyConfigMustBeARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "rules.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for path, want := range map[string]string{
		fifo:        fifo + ": not a regular file (p---------)",
		"/dev/zero": "/dev/zero: not a regular file (Dc---------)",
		t.TempDir(): ": not a regular file (d---------)",
	} {
		out, code := runProxy(t, "-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0", "-config", path)
		assert.Equal(t, exitUsage, code, out)
		assert.Contains(t, out, want, path)
	}
}
