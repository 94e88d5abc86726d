package rls_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

// An edit applies without a restart; a broken edit keeps the last good config and logs why; a
// limit the edit leaves alone keeps its counts.
func TestWatchAppliesEditsAndKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "app.yaml")
	// Each edit lands whole (written aside, then renamed), as config management tools write
	// files, so that a loaded machine cannot show the watcher a half-written file as a second
	// broken edit.
	write := func(body string) {
		tmp := filepath.Join(t.TempDir(), "next.yaml")
		require.NoError(t, os.WriteFile(tmp, []byte(body), 0o644))
		require.NoError(t, os.Rename(tmp, file))
	}
	const kept = "  - key: kept\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"
	write("domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n" + kept)
	cfg, err := rls.LoadConfig(dir)
	require.NoError(t, err)
	s := serve(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { s.srv.Watch(ctx, dir, 10*time.Millisecond); close(watched) }()
	defer func() { cancel(); <-watched }()

	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "app", 0, desc("k", "x"))))
	require.Equal(t, []string{over, over}, outcome(s.call(t, "app", 0, desc("k", "x"))))
	require.Equal(t, uint32(2), s.call(t, "app", 0, desc("kept", "x")).GetStatuses()[0].GetLimitRemaining())

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(failsafe)
		for !cond() {
			require.True(t, time.Now().Before(deadline), "%s: not seen; log:\n%s", what, s.log.String())
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Raise k's limit to 5: the new limit starts with its own count.
	write("domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n" + kept)
	waitFor("the raised limit", func() bool {
		return s.call(t, "app", 0, desc("k", "y")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	})
	require.Contains(t, s.log.String(), "config reloaded from "+dir+": domains app")
	r := s.call(t, "app", 0, desc("kept", "x"))
	require.Equal(t, uint32(1), r.GetStatuses()[0].GetLimitRemaining(), "an unchanged limit keeps its count")

	// A broken edit: logged with the file and the reason, and the last good config stays.
	write("domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n")
	waitFor("the log line", func() bool {
		return contains(s.log.String(), "config change in "+dir+" not applied, keeping the last good config: "+file+": line 4: unknown unit \"fortnight\"")
	})
	require.Equal(t, uint32(5), s.call(t, "app", 0, desc("k", "z")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	require.Contains(t, scrape(t, s.srv), `slidelimit_rls_config_reloads_total{result="error"} 1`)

	// A new file adds a domain.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("domain: other\ndescriptors:\n  - key: o\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644))
	write("domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n")
	waitFor("the new domain", func() bool {
		return s.call(t, "other", 0, desc("o", "1")).GetStatuses()[0].GetCurrentLimit() != nil
	})
	require.Equal(t, uint32(7), s.call(t, "app", 0, desc("k", "z")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	// kept was removed: unknown now, so OK with no limit.
	require.Nil(t, s.call(t, "app", 0, desc("kept", "x")).GetStatuses()[0].GetCurrentLimit())
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// ReloadFile applies the file at once and counts the outcome; a file that does not load is
// returned as the error, and the last good config stays.
func TestReloadFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "app.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644))
	cfg, err := rls.LoadConfig(file)
	require.NoError(t, err)
	s := serve(t, cfg)
	require.NoError(t, os.WriteFile(file, []byte("domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 4}\n"), 0o644))
	require.NoError(t, s.srv.ReloadFile(file))
	require.Equal(t, uint32(4), s.call(t, "app", 0, desc("k", "x")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	require.NoError(t, os.WriteFile(file, []byte("domain: app\ndescriptors:\n  - key: [k]\n"), 0o644))
	require.ErrorContains(t, s.srv.ReloadFile(file), "key is a list")
	require.Equal(t, uint32(4), s.call(t, "app", 0, desc("k", "x")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	m := scrape(t, s.srv)
	require.Contains(t, m, `slidelimit_rls_config_reloads_total{result="ok"} 1`)
	require.Contains(t, m, `slidelimit_rls_config_reloads_total{result="error"} 1`)
}

// A reload on demand is where a running Watch starts from: the edit it applied is not applied and
// counted a second time by the next polls.
func TestReloadFileAlongsideWatch(t *testing.T) {
	file := filepath.Join(t.TempDir(), "app.yaml")
	body := func(n int) []byte {
		return []byte("domain: app\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(n) + "}\n")
	}
	require.NoError(t, os.WriteFile(file, body(1), 0o644))
	cfg, err := rls.LoadConfig(file)
	require.NoError(t, err)
	s := serve(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	// Polls far enough apart that the edit below is applied by ReloadFile, not by Watch, which
	// waits two polls for a file to hold still.
	go func() { s.srv.Watch(ctx, file, 200*time.Millisecond); close(watched) }()
	defer func() { cancel(); <-watched }()
	require.NoError(t, os.WriteFile(file, body(3), 0o644))
	require.NoError(t, s.srv.ReloadFile(file))
	time.Sleep(1200 * time.Millisecond) // six polls
	require.Equal(t, uint32(3), s.call(t, "app", 0, desc("k", "x")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	require.Contains(t, scrape(t, s.srv), `slidelimit_rls_config_reloads_total{result="ok"} 1`)
	require.Equal(t, 1, strings.Count(s.log.String(), "config reloaded from"), s.log.String())
}

// Watch returns once the server is closed, though its ctx goes on: it polled until ctx ended,
// a goroutine outliving the server it reloads.
func TestWatchStopsAtClose(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.yaml"), []byte("domain: app\ndescriptors:\n  - key: k\n"), 0o644))
	cfg, err := rls.LoadConfig(dir)
	require.NoError(t, err)
	srv, err := rls.NewServer(cfg)
	require.NoError(t, err)
	watched := make(chan struct{})
	go func() { srv.Watch(context.Background(), dir, 10*time.Millisecond); close(watched) }()
	require.NoError(t, srv.Close())
	select {
	case <-watched:
	case <-time.After(failsafe):
		t.Fatal("Watch went on polling after Close")
	}
}
