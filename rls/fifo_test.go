//go:build linux || darwin

package rls_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

// within runs f and fails the test if it has not returned within failsafe; a call blocked in
// the kernel cannot be stopped, so it is left behind (and the package's leak check reports it).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(failsafe):
		t.Fatalf("%s did not return", what)
	}
}

// A FIFO (or socket, or device) is not read: opening one blocks until a writer comes, so a
// config directory holding one hung LoadConfig, and Watch's every poll. Named like a config
// file it is refused with its name; named otherwise it is skipped, as any other file is.
func TestNonRegularFilesAreNotRead(t *testing.T) {
	dir := t.TempDir()
	const body = "domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(body), 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644))
	var cfg *rls.Config
	var err error
	within(t, "LoadConfig beside a FIFO", func() { cfg, err = rls.LoadConfig(dir) })
	require.NoError(t, err)
	require.Equal(t, []string{"app"}, cfg.Domains())

	s := serve(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.srv.Watch(ctx, dir, 10*time.Millisecond)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(body+"  - key: new\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644))
	deadline := time.Now().Add(failsafe)
	for s.call(t, "app", 0, desc("new", "x")).GetStatuses()[0].GetCurrentLimit() == nil {
		require.True(t, time.Now().Before(deadline), "the edit beside the FIFO was not applied")
		time.Sleep(10 * time.Millisecond)
	}

	fifo := filepath.Join(dir, "other.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	within(t, "LoadConfig of a FIFO named .yaml", func() { cfg, err = rls.LoadConfig(dir) })
	require.Nil(t, cfg)
	require.ErrorContains(t, err, fifo+": not a regular file")
	within(t, "LoadConfig of a FIFO", func() { cfg, err = rls.LoadConfig(fifo) })
	require.Nil(t, cfg)
	require.ErrorContains(t, err, fifo+": not a regular file or a directory")
}
