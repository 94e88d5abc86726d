package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A bare 0 is zero, as time.ParseDuration reads it and as the help of -config-poll and
// -max-delay offers it; any other bare number still needs a unit.
func TestParseDurationZero(t *testing.T) {
	for _, in := range []string{"0", "+0", "-0"} {
		d, err := parseDuration(in)
		require.NoError(t, err, in)
		assert.Zero(t, d, in)
	}
	for _, in := range []string{"5", "0.0", "00"} {
		_, err := parseDuration(in)
		assert.ErrorContains(t, err, "has no unit: add a unit, like "+in+"s", in)
	}
}

// -config-poll 0 (SIGHUP only) and -max-delay 0 (refuse at once) start the proxy, and SIGHUP still
// reloads the file.
func TestProxyZeroDurationFlags(t *testing.T) {
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, "rules:\n  - name: one\n    paths: [/one]\n    rates: [1/1h]\n")
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0", "-max-delay", "0", "-limit", "1", "-window", "1h")
	c := newClient(t, true)
	assert.Equal(t, []int{200, 429}, []int{do(t, c, p.url("/"), nil).status, do(t, c, p.url("/"), nil).status}, "-max-delay 0 refuses at once")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "config reloaded") })
}

const noRefundWarning = "cannot give units back"

// Several limits that cannot give back are not all or nothing: the proxy says so at start (and
// serves anyway), for the command line's rule and for a file's rule; limits that can give back,
// or a single one that cannot, give no warning.
func TestProxyWarnsLimitsThatCannotGiveBack(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-policy", "sliding-log", "-rate", "100/1h", "-rate", "1/1m")
	assert.Contains(t, p.stderr(), `level=WARN msg="rule default: 2 of its limits `+noRefundWarning+` (-policy sliding-log): a request refused by a later limit stays counted by the earlier ones"`)
	c := newClient(t, true)
	assert.Equal(t, []int{200, 429}, []int{do(t, c, p.url("/"), nil).status, do(t, c, p.url("/"), nil).status})

	for _, args := range [][]string{
		{"-policy", "sliding-counter", "-rate", "100/1h", "-rate", "1/1m"},
		{"-policy", "sliding-log", "-rate", "1/1m"},
	} {
		q := startProxy(t, append([]string{"-upstream", up.URL}, args...)...)
		assert.NotContains(t, q.stderr(), noRefundWarning, "%v", args)
	}

	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, "rules:\n  - name: login\n    paths: [/login]\n    rates: [5/1m, 20/1h]\n    policy: sliding-log\n")
	f := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0")
	assert.Contains(t, f.stderr(), "rule login: 2 of its limits "+noRefundWarning+" (policy sliding-log)")
	assert.NotContains(t, f.stderr(), "rule default:")
	// And again on a reload that keeps such a rule.
	require.NoError(t, f.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(f.stderr(), "config reloaded") })
	assert.Equal(t, 2, strings.Count(f.stderr(), "rule login: 2 of its limits "+noRefundWarning))
}

// SIGTERM with a request still running after -shutdown-timeout: the proxy cuts it off, says so,
// and exits 0, as asked.
func TestProxyShutdownCutsOffLateRequests(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	}))
	t.Cleanup(up.Close)
	defer close(release)
	p := startProxy(t, "-upstream", up.URL, "-shutdown-timeout", "100ms", "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	failed := make(chan error, 1)
	go func() {
		res, err := c.Get(p.url("/slow"))
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		failed <- err
	}()
	select {
	case <-entered:
	case <-time.After(failsafe):
		t.Fatal("the request never reached the upstream")
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(failsafe):
		t.Fatalf("the proxy did not exit after SIGTERM:\n%s", p.stderr())
	}
	assert.NoError(t, p.err, "exit status:\n%s", p.stderr())
	assert.Contains(t, p.stderr(), `level=WARN msg="requests still in flight after -shutdown-timeout 100ms were cut off"`)
	assert.Contains(t, p.stderr(), "msg=stopped")
	assert.Error(t, <-failed, "the request in flight was cut off")
}

// go-redis's own lines (dial failures while Redis is down) go through the command's logger: JSON
// with -log-format json, the password hidden.
func TestProxyRedisClientLogIsJSON(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-redis", "redis://:s3cretpw@127.0.0.1:1/0", "-limit", "1", "-log-format", "json")
	c := newClient(t, true)
	// Each request dials Redis again (the failure mode decides it), until go-redis has logged.
	waitFor(t, func() bool {
		do(t, c, p.url("/"), nil)
		return strings.Contains(p.stderr(), `"msg":"redis client: `)
	})
	for _, l := range strings.Split(strings.TrimSpace(p.stderr()), "\n") {
		var m map[string]any
		assert.NoError(t, json.Unmarshal([]byte(l), &m), "not JSON: %q", l)
		if strings.HasPrefix(m["msg"].(string), "redis client: ") {
			assert.Equal(t, "WARN", m["level"], l)
			assert.Contains(t, m, "suppressed", l)
		}
	}
	assert.NotContains(t, p.stderr(), "s3cretpw")
}

// The same in "slidelimit rls", through its log.Logger.
func TestRLSRedisClientLogForwarded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 3}\n"), 0o644))
	p := startRLS(t, "-config", file, "-redis", "redis://:s3cretpw@127.0.0.1:1/0", "-reload-interval", "0")
	c, _ := rlsClient(t, p.addr)
	waitFor(t, func() bool {
		rlsCall(t, c, "edge", "remote_address", "203.0.113.5")
		return strings.Contains(p.stderr(), "warning: redis client: ")
	})
	for _, l := range strings.Split(strings.TrimSpace(p.stderr()), "\n") {
		assert.True(t, strings.HasPrefix(l, "slidelimit rls: "), "a line not from the command's logger: %q", l)
	}
	assert.NotContains(t, p.stderr(), "s3cretpw")
}

// The forwarder passes one line per interval, counting the ones it dropped, and hides the
// password.
func TestRedisLoggerRateLimits(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	type line struct {
		msg        string
		suppressed int
	}
	var got []line
	l := &redisLogger{
		emit:     func(msg string, n int) { got = append(got, line{msg, n}) },
		raw:      "redis://:pw123@127.0.0.1:1/0",
		interval: time.Second,
		now:      func() time.Time { return now },
	}
	ctx := context.Background()
	l.Printf(ctx, "dial %s failed: auth pw123\n", "redis://:pw123@127.0.0.1:1/0")
	for range 5 {
		now = now.Add(100 * time.Millisecond)
		l.Printf(ctx, "again")
	}
	now = now.Add(600 * time.Millisecond)
	l.Printf(ctx, "later")
	assert.Equal(t, []line{{"dial redis://:xxxxx@127.0.0.1:1/0 failed: auth xxxxx", 0}, {"later", 5}}, got)
}

// Every documented counter, and each documented label value, is exported from the start, at 0.
func TestMetricsExistBeforeTheirFirstEvent(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	m := do(t, c, "http://"+p.metrics+"/metrics", nil).body
	for _, want := range []string{
		`slidelimit_exempt_total{why="path"} 0`,
		`slidelimit_exempt_total{why="cidr"} 0`,
		`slidelimit_config_reloads_total{result="ok"} 0`,
		`slidelimit_config_reloads_total{result="error"} 0`,
		`slidelimit_decisions_total{decision="allowed",reason="ok",rule="default"} 0`,
		`slidelimit_decisions_total{decision="denied",reason="limited",rule="default"} 0`,
		`slidelimit_decision_duration_seconds_count{rule="default"} 0`,
		`slidelimit_limiter_errors_total 0`,
		`slidelimit_connections_refused_total 0`,
	} {
		assert.Contains(t, m, want+"\n")
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 3}\n"), 0o644))
	r := startRLS(t, "-config", dir, "-metrics-listen", "127.0.0.1:0", "-reload-interval", "50ms")
	m = do(t, c, "http://"+r.metrics+"/metrics", nil).body
	for _, want := range []string{
		`slidelimit_rls_config_reloads_total{result="error"} 0`,
		`slidelimit_rls_config_reloads_total{result="ok"} 0`,
		`slidelimit_rls_backend_errors_total 0`,
	} {
		assert.Contains(t, m, want+"\n")
	}
	// After a reload the real series takes over, once.
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 4}\n"), 0o644))
	waitFor(t, func() bool { return strings.Contains(r.stderr(), "config reloaded") })
	m = do(t, c, "http://"+r.metrics+"/metrics", nil).body
	assert.Contains(t, m, `slidelimit_rls_config_reloads_total{result="ok"} 1`+"\n")
	assert.Contains(t, m, `slidelimit_rls_config_reloads_total{result="error"} 0`+"\n")
	assert.Equal(t, 1, strings.Count(m, `slidelimit_rls_config_reloads_total{result="ok"}`))
}

// A bad file at start names the file, the line, the rule and the field.
func TestProxyConfigErrorsNameFileAndRule(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"rules:\n  - name: login\n    rates: [5/1m]\n    ratez: [1/1s]\n":             `: line 4: rules[0] (login): unknown field "ratez" (want name, methods, paths, rates, policy, key)`,
		"rules:\n  - name: x\n    rates: [5/1m]\n    policy: bogus\n":                 `: rules[0] (x): policy "bogus": unknown policy; one of `,
		"rules:\n  - name: x\n    rates: [4000000000/1d]\n    policy: token-bucket\n": `: rules[0] (x): rates: 4000000000/1d: policy token-bucket: it needs a burst of 4000000000×27 units`,
	} {
		file := filepath.Join(dir, "bad.yaml")
		require.NoError(t, os.WriteFile(file, []byte(body), 0o644))
		out, code := runProxy(t, "-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0", "-config", file)
		assert.Equal(t, exitUsage, code, out)
		assert.Contains(t, out, "slidelimit proxy: -config "+file+want, body)
		assert.NotContains(t, out, "main.")
		assert.NotContains(t, out, "-policy")
	}
}

// runProxy runs "slidelimit proxy args..." to completion and returns its combined output and
// exit code.
func runProxy(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"proxy"}, args...)...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// On Redis, exact mode gives units back (no warning) and the batched mode cannot (a warning).
func TestProxyWarnsBatchedLimits(t *testing.T) {
	addr, _ := startRedis(t)
	up := newUpstream(t)
	base := []string{"-upstream", up.URL, "-redis", "redis://" + addr + "/0", "-redis-timeout", "5s", "-rate", "100/1h", "-rate", "1/1m"}
	exact := startProxy(t, append(base, "-name", "warn-exact")...)
	assert.NotContains(t, exact.stderr(), noRefundWarning)
	batched := startProxy(t, append(base, "-name", "warn-batched", "-redis-mode", "batched")...)
	assert.Contains(t, batched.stderr(), "rule warn-batched: 2 of its limits "+noRefundWarning+" (-redis-mode batched)")
}
