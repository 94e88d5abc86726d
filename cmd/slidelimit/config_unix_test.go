//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TLS files must be regular files too, at start and when read again: a FIFO blocked the read
// under the lock every handshake takes, so one swapped in hung every new connection for good, and
// /dev/zero took the process's memory.
func TestTLSFilesMustBeRegularFiles(t *testing.T) {
	ca, certFile, keyFile := serverCertFiles(t, "proxy")
	dir := filepath.Dir(certFile)
	fifo := filepath.Join(dir, "cert.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for path, want := range map[string]string{
		fifo:        "-tls-cert: " + fifo + ": not a regular file (p---------)",
		"/dev/zero": "-tls-cert: /dev/zero: not a regular file (Dc---------)",
	} {
		out, code := runProxy(t, "-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0", "-tls-cert", path, "-tls-key", keyFile)
		assert.Equal(t, exitUsage, code, out)
		assert.Contains(t, out, want, path)
	}

	live := filepath.Join(dir, "live.crt")
	require.NoError(t, os.Symlink(certFile, live))
	p := startProxy(t, "-upstream", "http://127.0.0.1:1", "-tls-cert", live, "-tls-key", keyFile)
	require.NoError(t, os.Remove(live))
	require.NoError(t, os.Symlink(fifo, live))
	time.Sleep(1100 * time.Millisecond) // past the once-a-second look
	done := make(chan string, 1)
	go func() { done <- servedName(t, p.addr, ca.pool) }()
	select {
	case name := <-done:
		assert.Equal(t, "proxy", name, "the last good certificate")
	case <-time.After(failsafe):
		t.Fatal("a handshake hung on a TLS file swapped for a FIFO")
	}
	require.Eventually(t, func() bool { return strings.Contains(p.stderr(), "not a regular file") }, failsafe, 10*time.Millisecond)
}
