package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/redisstore/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startRedis runs a throwaway redis-server (redistest) on a free loopback port and returns its
// address and a stop function. It skips the test when the server program is not installed,
// except under CI=true, where that fails.
func startRedis(t *testing.T) (addr string, stop func()) {
	t.Helper()
	srv := redisServer(t)
	return srv.Addr, srv.Kill
}

// redisServer is startRedis's server itself, for a test that pauses or restarts it; it is stopped
// when the test ends.
func redisServer(t *testing.T) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start()
	if errors.Is(err, redistest.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip("redis-server is not installed")
	}
	require.NoError(t, err, "CI must run the Redis end-to-end tests")
	t.Cleanup(srv.Stop)
	return srv
}

// Two proxy processes on one Redis hold one limit between them; when Redis goes away each
// falls back to its own in-process limit, and the metrics say so.
func TestTwoProxiesShareRedis(t *testing.T) {
	addr, stopRedis := startRedis(t)
	up := newUpstream(t)
	const window = int64(3_600_000)
	for attempt := 0; ; attempt++ {
		before := time.Now().UnixMilli()
		args := []string{"-upstream", up.URL, "-limit", "4", "-window", "1h", "-redis", "redis://" + addr + "/0", "-name", "e2e" + strconv.Itoa(attempt), "-trusted-proxies", "127.0.0.1", "-metrics-listen", "127.0.0.1:0"}
		p1, p2 := startProxy(t, args...), startProxy(t, args...)
		c := newClient(t, true)
		var codes []int
		var last resp
		for i := range 8 {
			p := p1
			if i%2 == 1 {
				p = p2
			}
			last = do(t, c, p.url("/"), nil)
			codes = append(codes, last.status)
		}
		if after := time.Now().UnixMilli(); after >= before-before%window+window && attempt == 0 {
			continue // straddled an hour boundary: run again in the next window
		}
		assert.Equal(t, []int{200, 200, 200, 200, 429, 429, 429, 429}, codes)
		assert.Equal(t, `"e2e`+strconv.Itoa(attempt)+`";q=4;w=3600`, last.policy)
		assert.Regexp(t, `^"e2e\d";r=0;t=\d+$`, last.rateLimit)
		assert.NotEmpty(t, last.retryAfter)

		stopRedis()
		// The refused client is still refused from the store's local deny cache; a new one is
		// decided by the in-process fallback.
		assert.Equal(t, 429, do(t, c, p1.url("/"), nil).status, "the deny cache still refuses")
		assert.Equal(t, 200, do(t, c, p1.url("/"), map[string]string{"X-Forwarded-For": "203.0.113.9"}).status, "the fallback decides while Redis is down")
		m := do(t, c, "http://"+p1.metrics+"/metrics", nil).body
		assert.GreaterOrEqual(t, metric(t, m, "slidelimit_redis_errors_total"), 1.0)
		assert.GreaterOrEqual(t, metric(t, m, "slidelimit_redis_fallbacks_total"), 1.0)
		assert.Equal(t, 1.0, metric(t, m, "slidelimit_keys_tracked"))
		return
	}
}

func metric(t *testing.T, body, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "metric %s missing", name)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// -on-redis-error closed refuses with 503 while Redis is down; local decides in process, each
// proxy enforcing its -fleet-size share (limit/N rounded down); open admits everything.
func TestProxyRedisFailureModes(t *testing.T) {
	addr, stopRedis := startRedis(t)
	up := newUpstream(t)
	base := []string{"-upstream", up.URL, "-limit", "4", "-window", "1h", "-redis", "redis://" + addr + "/0", "-redis-timeout", "5s", "-trusted-proxies", "127.0.0.1"}
	closed := startProxy(t, append(base, "-name", "modes-closed", "-on-redis-error", "closed")...)
	local := startProxy(t, append(base, "-name", "modes-local", "-on-redis-error", "local", "-fleet-size", "2")...)
	open := startProxy(t, append(base, "-name", "modes-open", "-on-redis-error", "open")...)
	c := newClient(t, true)
	for _, p := range []*proc{closed, local, open} {
		assert.Equal(t, 200, do(t, c, p.url("/"), nil).status, "Redis up")
	}
	stopRedis()
	client := func(i int) map[string]string {
		return map[string]string{"X-Forwarded-For": "203.0.113." + strconv.Itoa(i)}
	}
	r := do(t, c, closed.url("/"), client(1))
	assert.Equal(t, 503, r.status)
	assert.Equal(t, "rate limiter unavailable\n", r.body)
	assert.NotEmpty(t, r.retryAfter)
	var codes []int
	for i := range 3 {
		r := do(t, c, local.url("/"), client(2))
		codes = append(codes, r.status)
		// The fallback decides on the proxy's share, not on the quota the policy item
		// advertises: the limit is listed there, with no figures of the share in RateLimit.
		assert.Equal(t, `"modes-local";q=4;w=3600`, r.policy, "request %d", i)
		assert.Empty(t, r.rateLimit, "request %d", i)
		if r.status == 429 {
			assert.NotEmpty(t, r.retryAfter)
		}
	}
	assert.Equal(t, []int{200, 200, 429}, codes, "the fallback enforces 4/2 = 2 per proxy")
	codes = nil
	for range 6 {
		codes = append(codes, do(t, c, open.url("/"), client(3)).status)
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 200}, codes)
}

// -redis-mode batched: two proxy processes lease quota from one Redis and decide in process, and
// together admit exactly the limit; the mode refuses a policy it cannot run, naming it.
func TestTwoProxiesShareBatchedRedis(t *testing.T) {
	addr, _ := startRedis(t)
	up := newUpstream(t)
	const window = int64(3_600_000)
	for attempt := 0; ; attempt++ {
		before := time.Now().UnixMilli()
		args := []string{"-upstream", up.URL, "-limit", "6", "-window", "1h", "-redis", "redis://" + addr + "/0", "-redis-mode", "batched", "-name", "batched" + strconv.Itoa(attempt)}
		p1, p2 := startProxy(t, args...), startProxy(t, args...)
		c := newClient(t, true)
		var codes []int
		for i := range 12 {
			p := p1
			if i%2 == 1 {
				p = p2
			}
			codes = append(codes, do(t, c, p.url("/"), nil).status)
		}
		if after := time.Now().UnixMilli(); after >= before-before%window+window && attempt == 0 {
			continue // straddled an hour boundary: run again in the next window
		}
		admitted := 0
		for _, code := range codes {
			if code == 200 {
				admitted++
			} else {
				assert.Equal(t, 429, code)
			}
		}
		assert.Equal(t, 6, admitted, "the fleet admits the limit, no more: %v", codes)
		break
	}

	var stderr bytes.Buffer
	cmd := exec.Command(binary, "proxy", "-listen", "127.0.0.1:0", "-upstream", up.URL, "-redis", "redis://"+addr+"/0", "-redis-mode", "batched", "-policy", "gcra", "-limit", "5", "-window", "1s")
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.Error(t, err)
	assert.Contains(t, stderr.String(), "-redis-mode batched with -policy gcra")
}

// Several limits on Redis are all or nothing: the per-hour limit is asked first, and what it
// counted for a request the per-second limit then refuses is given back (redisstore's Refund),
// so the hour counts only admissions. Without the refund it would read 94, not 97.
func TestSeveralRedisLimitsAllOrNothing(t *testing.T) {
	addr, _ := startRedis(t)
	up := newUpstream(t)
	c := newClient(t, true)
	for attempt := 0; attempt < 5; attempt++ {
		name := "several" + strconv.Itoa(attempt)
		p := startProxy(t, "-upstream", up.URL, "-rate", "100/1h", "-rate", "2/1s", "-redis", "redis://"+addr+"/0", "-redis-timeout", "5s", "-name", name)
		var codes []int
		for range 5 {
			codes = append(codes, do(t, c, p.url("/"), nil).status)
		}
		if !assert.ObjectsAreEqual([]int{200, 200, 429, 429, 429}, codes) {
			continue // the five straddled a second's edge: again, on fresh keys
		}
		time.Sleep(1100 * time.Millisecond) // the next second: the per-second limit admits again
		last := do(t, c, p.url("/"), nil)
		require.Equal(t, 200, last.status)
		m := regexp.MustCompile(`"` + name + `-1h";r=(\d+)`).FindStringSubmatch(last.rateLimit)
		require.NotNil(t, m, "no per-hour item in RateLimit: %q", last.rateLimit)
		assert.Equal(t, "97", m[1], "the hour counted only the three admitted requests: %q", last.rateLimit)
		return
	}
	t.Fatal("five requests never fell in one second")
}

// A batched proxy that starts while Redis is down has never heard the fleet's size from it: it
// assumes -fleet-size proxies, so that a fleet started (or restarted) during an outage still
// admits at most the limit together. Limit 6 over a fleet of 3 is 2 for this proxy.
func TestBatchedProxyStartedDuringOutageTakesItsShare(t *testing.T) {
	addr, stopRedis := startRedis(t)
	stopRedis() // nothing answers at addr any more
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "6", "-window", "1h", "-redis", "redis://"+addr+"/0",
		"-redis-mode", "batched", "-redis-timeout", "20ms", "-on-redis-error", "local", "-fleet-size", "3", "-name", "outage-start",
		"-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	var codes []int
	for range 4 {
		codes = append(codes, do(t, c, p.url("/"), nil).status)
	}
	assert.Equal(t, []int{200, 200, 429, 429}, codes)
	// The Redis metrics count batched mode's failures and offline decisions too.
	m := do(t, c, "http://"+p.metrics+"/metrics", nil).body
	assert.GreaterOrEqual(t, metric(t, m, "slidelimit_redis_errors_total"), 1.0)
	assert.Equal(t, 4.0, metric(t, m, "slidelimit_redis_fallbacks_total"), "every request was decided alone")
	assert.Equal(t, 1.0, metric(t, m, "slidelimit_redis_breaker_open"), "offline")
	assert.Equal(t, 1.0, metric(t, m, "slidelimit_keys_tracked"), "the one client the batched limiter decided alone")
}

// A batched proxy under -on-redis-error closed refuses while Redis does not answer, and its
// refusals cost the client nothing: once Redis answers again the client has its whole limit. (They
// used to be decided on the proxy's share first, and charged to Redis when it came back.)
func TestBatchedClosedRefusalsChargeNothing(t *testing.T) {
	srv := redisServer(t)
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "4", "-window", "1h", "-redis", "redis://"+srv.Addr+"/0",
		"-redis-mode", "batched", "-redis-timeout", "20ms", "-on-redis-error", "closed", "-name", "closed-outage")
	c := newClient(t, true)
	require.NoError(t, srv.Pause())
	for range 6 {
		assert.Equal(t, 503, do(t, c, p.url("/"), nil).status, "Redis paused, closed")
	}
	require.NoError(t, srv.Resume())
	waitFor(t, func() bool { return do(t, c, p.url("/"), nil).status == 200 }) // a heartbeat hears Redis again
	var codes []int
	for range 4 {
		codes = append(codes, do(t, c, p.url("/"), nil).status)
	}
	assert.Equal(t, []int{200, 200, 200, 429}, codes, "the limit of 4, whole: the 503s took nothing")
}

// While Redis is down, -on-redis-error open and closed decide the requests no limit could: they
// are counted in slidelimit_decisions_total with reason="redis_error" (allowed with open, denied
// with closed), in both Redis modes, and the access log writes their line. Nothing listens on
// port 1, so Redis fails from the start.
func TestProxyRedisFailureModeDecisionsAreCountedAndLogged(t *testing.T) {
	up := newUpstream(t)
	c := newClient(t, true)
	for _, tc := range []struct {
		mode, failure, decision string
		status                  int
	}{
		{"exact", "open", "allowed", 200},
		{"exact", "closed", "denied", 503},
		{"batched", "open", "allowed", 200},
		{"batched", "closed", "denied", 503},
	} {
		name := tc.mode + "/" + tc.failure
		p := startProxy(t, "-upstream", up.URL, "-redis", "redis://127.0.0.1:1/0", "-redis-mode", tc.mode, "-redis-timeout", "20ms",
			"-on-redis-error", tc.failure, "-log-admitted", "1", "-log-refused", "1", "-metrics-listen", "127.0.0.1:0")
		series := `slidelimit_decisions_total{decision="` + tc.decision + `",reason="redis_error",rule="default"}`
		assert.Contains(t, do(t, c, "http://"+p.metrics+"/metrics", nil).body, series+" 0\n", "%s: the series exists from the start", name)
		var waits []string
		for range 2 {
			r := do(t, c, p.url("/x"), nil)
			assert.Equal(t, tc.status, r.status, name)
			waits = append(waits, r.retryAfter)
		}
		waitFor(t, func() bool { return strings.Count(p.stderr(), "msg=request") == 2 })
		want := "msg=request rule=default decision=" + tc.decision + " reason=redis_error status=" + strconv.Itoa(tc.status)
		assert.Equal(t, 2, strings.Count(p.stderr(), want), "%s: one access-log line each:\n%s", name, p.stderr())
		// The log gives the wait the 503 sent in Retry-After (it said 0), and none for an
		// admission.
		var logged []string
		for _, m := range regexp.MustCompile(`msg=request .* retry_after_ms=(\d+)`).FindAllStringSubmatch(p.stderr(), -1) {
			logged = append(logged, m[1])
		}
		for i, w := range waits {
			if tc.status == 503 {
				secs, err := strconv.Atoi(w)
				require.NoError(t, err, "%s: Retry-After %q", name, w)
				waits[i] = strconv.Itoa(secs * 1000)
			} else {
				waits[i] = "0"
			}
		}
		assert.Equal(t, waits, logged, "%s: retry_after_ms against Retry-After", name)
		m := do(t, c, "http://"+p.metrics+"/metrics", nil).body
		assert.Contains(t, m, series+" 2\n", "%s: both counted as decided", name)
		assert.GreaterOrEqual(t, metric(t, m, "slidelimit_limiter_errors_total"), 2.0, name)
	}
}

// In -redis-mode batched the limiter's offline error says it decides locally, which only
// -on-redis-error local does: with open or closed the log line names the mode in force.
func TestProxyBatchedOfflineLogNamesTheFailureMode(t *testing.T) {
	up := newUpstream(t)
	c := newClient(t, true)
	for _, tc := range []struct {
		failure, want string
		status        int
	}{
		{"closed", "batched: offline: refused, counting nothing (WithOfflineMode(FailClosed))", 503},
		{"open", "batched: offline: admitted, counting nothing (WithOfflineMode(FailOpen))", 200},
		{"local", "batched: deciding locally with the limit divided by the fleet size", 200},
	} {
		p := startProxy(t, "-upstream", up.URL, "-redis", "redis://127.0.0.1:1/0", "-redis-mode", "batched", "-redis-timeout", "20ms",
			"-on-redis-error", tc.failure)
		assert.Equal(t, tc.status, do(t, c, p.url("/x"), nil).status, tc.failure)
		waitFor(t, func() bool { return strings.Contains(p.stderr(), "limiter error") })
		line := regexp.MustCompile(`(?m)^.*limiter error.*$`).FindString(p.stderr())
		assert.Contains(t, line, tc.want, tc.failure)
		if tc.failure != "local" {
			assert.NotContains(t, p.stderr(), "deciding locally", tc.failure)
		}
	}
}

// With -log-format json every line on stderr is JSON, redisstore's own (its breaker opening while
// Redis does not answer) included: those went to log/slog's default logger, as plain text.
func TestProxyJSONLogsIncludeTheStoresLines(t *testing.T) {
	up := newUpstream(t)
	c := newClient(t, true)
	p := startProxy(t, "-upstream", up.URL, "-redis", "redis://127.0.0.1:1/0", "-redis-timeout", "20ms",
		"-on-redis-error", "open", "-log-format", "json")
	for range 3 * 10 { // the breaker opens after 10 calls of which half failed
		do(t, c, p.url("/x"), nil)
	}
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "circuit breaker opened") })
	for _, line := range strings.Split(strings.TrimSpace(p.stderr()), "\n") {
		var v map[string]any
		assert.NoError(t, json.Unmarshal([]byte(line), &v), "a line that is not JSON: %s", line)
	}
}

// A client that Redis refused is answered from the proxy's deny cache. When Redis then loses the
// key (FLUSHALL here; another host's reset is the same to this proxy), a proxy started with
// -redis-deny-max-age asks Redis again once that much time has passed, and admits; one without
// it goes on refusing until the retry time, about an hour here.
func TestProxyRedisDenyMaxAge(t *testing.T) {
	addr, _ := startRedis(t)
	up := newUpstream(t)
	base := []string{"-upstream", up.URL, "-redis", "redis://" + addr + "/0", "-redis-timeout", "5s", "-rate", "1/1h"}
	bounded := startProxy(t, append(base, "-name", "bounded", "-redis-deny-max-age", "100ms")...)
	plain := startProxy(t, append(base, "-name", "plain")...)
	c := newClient(t, true)
	for _, p := range []*proc{bounded, plain} {
		require.Equal(t, 200, do(t, c, p.url("/"), nil).status)
		require.Equal(t, 429, do(t, c, p.url("/"), nil).status)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.NoError(t, rdb.FlushAll(context.Background()).Err())
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 200, do(t, c, bounded.url("/"), nil).status, "past -redis-deny-max-age Redis decides, and it has lost the key")
	assert.Equal(t, 429, do(t, c, plain.url("/"), nil).status, "without the flag the deny cache refuses until the retry time")
}

// slidelimit_redis_breaker_open counts the limiters in use: one whose breaker opened while Redis
// was down, and which a reload then replaced, no longer holds it at 1 once the limiters in use
// decide through Redis again. It did for good, as the retired limiter kept the state it closed in.
func TestProxyBreakerGaugeForgetsRetiredLimiters(t *testing.T) {
	srv := redisServer(t)
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, "rules:\n  - name: r\n    paths: [/r]\n    rates: [3/1m]\n")
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "50ms", "-redis", "redis://"+srv.Addr+"/0",
		"-redis-timeout", "5s", "-on-redis-error", "open", "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	gauge := func() float64 {
		return metric(t, do(t, c, "http://"+p.metrics+"/metrics", nil).body, "slidelimit_redis_breaker_open")
	}
	require.Equal(t, 200, do(t, c, p.url("/r"), nil).status)
	srv.Kill()
	waitFor(t, func() bool {
		do(t, c, p.url("/r"), nil) // failures open the breaker
		return gauge() == 1
	})
	writeFile(t, cfg, "rules:\n  - name: r\n    paths: [/r]\n    rates: [4/1m]\n")
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "config reloaded") })
	require.NoError(t, srv.Restart())
	r := do(t, c, p.url("/r"), nil)
	require.Equal(t, 200, r.status)
	require.NotEmpty(t, r.rateLimit, "decided on Redis again, by the new limit")
	assert.Equal(t, 0.0, gauge(), "the retired limiter's open breaker still counted")
}

// A reload retires a limit only once the requests routed to it have decided, Redis calls
// included: a request still waiting on a hung Redis past -shutdown-timeout got a bare 503 from
// the closed limiter, where -on-redis-error local decides it alone.
func TestReloadWaitsForARequestDecidingOnRedis(t *testing.T) {
	srv := redisServer(t)
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(n int) {
		require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, "rules:\n  - name: r\n    rates: [%d/1m]\n    paths: [/r]\n", n), 0o644))
	}
	write(100)
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0", "-redis", "redis://"+srv.Addr+"/0",
		"-redis-timeout", "1s", "-shutdown-timeout", "100ms", "-on-redis-error", "local")
	c := newClient(t, false)
	require.Equal(t, 200, do(t, c, p.url("/r"), nil).status)
	require.NoError(t, srv.Pause())
	defer srv.Resume()
	status := make(chan int, 1)
	go func() { status <- do(t, c, p.url("/r"), nil).status }()
	time.Sleep(100 * time.Millisecond) // routed, and waiting on Redis for up to 1s
	write(101)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	assert.Equal(t, 200, <-status, "decided alone, as -on-redis-error local says:\n%s", p.stderr())
}
