package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With -redis-mode batched and -on-redis-error open or closed, the backend-error line names the
// mode in force: it said "batched: deciding locally with the limit divided by the fleet size"
// while every descriptor was refused (closed) or admitted without a limit (open).
func TestRLSBatchedOfflineLogNamesTheFailureMode(t *testing.T) {
	dir := edgeConfigDir(t)
	for _, failure := range []string{"closed", "open"} {
		p := startRLS(t, "-config", dir, "-redis", "redis://127.0.0.1:1/0", "-redis-mode", "batched", "-redis-timeout", "20ms",
			"-on-redis-error", failure, "-reload-interval", "0")
		c, _ := rlsClient(t, p.addr)
		rlsCall(t, c, "edge", "remote_address", "192.0.2.1")
		waitFor(t, func() bool { return strings.Contains(p.stderr(), "descriptor remote_address") })
		assert.NotContains(t, p.stderr(), "deciding locally", failure)
		words := map[string]string{"closed": "refused", "open": "admitted"}[failure]
		assert.Contains(t, p.stderr(), "batched: offline: "+words+", counting nothing", failure)
	}
}

// Every line the command writes is prefixed "slidelimit rls: " (docs/rls.md, Logs), redisstore's
// own included: its breaker line went to log/slog's default logger unprefixed.
func TestRLSStoreLinesArePrefixed(t *testing.T) {
	dir := edgeConfigDir(t)
	p := startRLS(t, "-config", dir, "-redis", "redis://127.0.0.1:1/0", "-redis-timeout", "20ms", "-reload-interval", "0")
	c, _ := rlsClient(t, p.addr)
	for range 30 { // the breaker opens after 10 calls of which half failed
		rlsCall(t, c, "edge", "remote_address", "192.0.2.1")
	}
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "circuit breaker opened") })
	for _, line := range strings.Split(strings.TrimSpace(p.stderr()), "\n") {
		assert.True(t, strings.HasPrefix(line, "slidelimit rls: "), "unprefixed line: %s", line)
	}
}

// A cost above the limit is refused while Redis is away, with no wait, under every
// -on-redis-error, as in exact mode: waiting never admits it, and no failure mode may. With
// -redis-mode batched, open admitted it and closed gave it a second's wait.
func TestRLSBatchedOfflineRefusesACostAboveTheLimit(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 10}\n"), 0o644))
	for _, mode := range []string{"exact", "batched"} {
		for _, failure := range []string{"closed", "open"} {
			p := startRLS(t, "-config", dir, "-redis", "redis://127.0.0.1:1/0", "-redis-mode", mode, "-redis-timeout", "20ms",
				"-on-redis-error", failure, "-reload-interval", "0")
			c, _ := rlsClient(t, p.addr)
			ctx, cancel := context.WithTimeout(context.Background(), failsafe)
			r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 11, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}},
			}}})
			cancel()
			require.NoError(t, err)
			assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode(), "%s %s", mode, failure)
			assert.Nil(t, r.GetStatuses()[0].GetDurationUntilReset(), "%s %s: waiting never admits 11 of 10", mode, failure)
		}
	}
}

// "stopped" is the last line either command writes, in batched mode too: a batched limiter closed
// while a sync waited on a hung Redis logged that it went offline after it.
func TestStoppedIsTheLastLineWhenRedisHangs(t *testing.T) {
	dir := edgeConfigDir(t)
	up := newUpstream(t)
	for _, command := range []string{"proxy", "rls"} {
		srv := redisServer(t)
		redis := []string{"-redis", "redis://" + srv.Addr + "/0", "-redis-mode", "batched", "-redis-timeout", "1s", "-on-redis-error", "local"}
		var p *proc
		if command == "proxy" {
			p = startProxy(t, append(redis, "-upstream", up.URL, "-limit", "30", "-window", "1m")...)
			assert.Equal(t, 200, do(t, newClient(t, false), p.url("/"), nil).status)
		} else {
			p = startLeasedRLS(t, append(redis, "-config", dir)...)
		}
		stopWithRedisHung(t, srv, p)
		p.exitedOK(t)
		require.NoError(t, srv.Resume())
		lines := strings.Split(strings.TrimSpace(p.stderr()), "\n")
		assert.Contains(t, lines[len(lines)-1], "stopped", "%s: a line after stopped:\n%s", command, p.stderr())
	}
}

// With a hung Redis, closing batched limiters (giving their leases back) waits on Redis; a
// second stop signal cuts that wait off at once, as it does the calls in flight. Nothing
// listened for it once those were done, and the limiters' Close calls, one after another, each
// waited out several -redis-timeout (here 20s).
func TestSecondSignalCutsOffClosingTheLimiters(t *testing.T) {
	dir := edgeConfigDir(t)
	up := newUpstream(t)
	// A request that the upstream holds is still in flight at the second signal: the close then
	// begins after it, and was not bounded.
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer held.Close()
	defer close(release)
	for _, command := range []string{"proxy", "proxy with a request in flight", "rls"} {
		srv := redisServer(t)
		redis := []string{"-redis", "redis://" + srv.Addr + "/0", "-redis-mode", "batched", "-redis-timeout", "20s"}
		var p *proc
		switch command {
		case "proxy":
			p = startProxy(t, append(redis, "-upstream", up.URL, "-rate", "30/1m", "-rate", "300/1h")...)
			assert.Equal(t, 200, do(t, newClient(t, false), p.url("/"), nil).status)
		case "proxy with a request in flight":
			p = startProxy(t, append(redis, "-upstream", held.URL, "-rate", "30/1m", "-rate", "300/1h")...)
			go http.Get(p.url("/held"))
			<-arrived // admitted, and waiting on the upstream
		default:
			p = startLeasedRLS(t, append(redis, "-config", dir)...)
		}
		stopWithRedisHung(t, srv, p)
		waitFor(t, func() bool { return strings.Contains(p.stderr(), "shutting down") })
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		// Not a measure of speed: the close it cuts off takes a Redis timeout or more (go-redis's
		// socket timeout, 5s, ends the calls first here), this a few milliseconds.
		select {
		case <-p.exited:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the second signal did not cut off closing the limiters:\n%s", command, p.stderr())
		}
		p.exitedOK(t)
		assert.Contains(t, p.stderr(), "a second stop signal", command)
		require.NoError(t, srv.Resume())
	}
}

// Every log line stays one line: a config file whose name holds a newline, refused at a reload,
// printed the rest of its name as a line of its own, with no prefix.
func TestRLSLogLinesStayOnOneLine(t *testing.T) {
	dir := edgeConfigDir(t)
	p := startRLS(t, "-config", dir, "-reload-interval", "0")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad\nforged line.yaml"), []byte("domain: [\n"), 0o644))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "not applied") })
	assert.Contains(t, p.stderr(), `bad\nforged line.yaml`)
	for _, line := range strings.Split(strings.TrimSpace(p.stderr()), "\n") {
		assert.True(t, strings.HasPrefix(line, "slidelimit rls: "), "a line of its own: %s", line)
	}
}

// edgeConfigDir writes a config directory of one domain, edge: 30 a minute per remote_address.
func edgeConfigDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 30}\n"), 0o644))
	return dir
}

// startLeasedRLS starts "slidelimit rls args..." on edgeConfigDir's config and makes one call,
// which in batched mode takes a lease.
func startLeasedRLS(t *testing.T, args ...string) *proc {
	t.Helper()
	p := startRLS(t, append(args, "-reload-interval", "0")...)
	c, _ := rlsClient(t, p.addr)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, rlsCall(t, c, "edge", "remote_address", "192.0.2.1").GetOverallCode())
	return p
}

// stopWithRedisHung pauses srv, waits until a batched limiter's sync (every 50ms) waits on it,
// and sends p SIGTERM.
func stopWithRedisHung(t *testing.T, srv *redistest.Server, p *proc) {
	t.Helper()
	require.NoError(t, srv.Pause())
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
}
