package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// badConfigs is the rls module's set of configs that must not load.
var badConfigs = filepath.Join("..", "..", "rls", "testdata", "bad")

// Every bad config stops the command at start, with a non-zero exit and a message that names the
// file and the reason.
func TestRLSBadConfigExits(t *testing.T) {
	reasons := map[string]string{
		"bad_yaml.yaml":             "bad YAML",
		"bad_unit.yaml":             `unknown unit "fortnight"`,
		"misspelled_field.yaml":     `unknown field "ratelimit"`,
		"duplicate_descriptor.yaml": "duplicate descriptor key1_value1",
		"empty_domain.yaml":         "domain is empty or missing",
		"empty_key.yaml":            "key is empty or missing",
		"non_map_list.yaml":         "want a map",
		"non_string_key.yaml":       "is not a string",
		"unlimited_with_unit.yaml":  "is unlimited and also sets unit",
		"replaces_self.yaml":        "its own name",
	}
	ents, err := os.ReadDir(badConfigs)
	require.NoError(t, err)
	require.NotEmpty(t, ents)
	for _, e := range ents {
		path := filepath.Join(badConfigs, e.Name())
		out, code := runRLS(t, "-config", path, "-listen", "127.0.0.1:0")
		require.Equal(t, exitFail, code, "%s:\n%s", e.Name(), out)
		require.Contains(t, out, "slidelimit rls: -config: "+path+": ", e.Name())
		if r, ok := reasons[e.Name()]; ok {
			require.Contains(t, out, r, e.Name())
		}
		require.NotContains(t, out, "listening on")
	}
	dup := filepath.Join(filepath.Dir(badConfigs), "dupdomain")
	out, code := runRLS(t, "-config", dup, "-listen", "127.0.0.1:0")
	require.Equal(t, exitFail, code)
	require.Contains(t, out, `slidelimit rls: -config: `+filepath.Join(dup, "b.yaml")+`: duplicate domain "test-domain": already defined in `+filepath.Join(dup, "a.yaml"))
}

func TestRLSBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-config is required"},
		{[]string{"-config", "x.yaml", "-redis-mode", "batched"}, "-redis-mode batched: needs -redis URL"},
		{[]string{"-config", "x.yaml", "-redis-mode", "fast"}, `-redis-mode "fast": want exact`},
		{[]string{"-config", "x.yaml", "-on-redis-error", "local"}, `-on-redis-error "local": want open or closed`},
		{[]string{"-config", "x.yaml", "-redis-timeout", "0s"}, "-redis-timeout 0s: must be in [1ms, 1m]"},
		{[]string{"-config", "x.yaml", "-redis-deny-max-age", "500us"}, "-redis-deny-max-age 500us: must be 0 (until the retry time) or at least 1ms"},
		{[]string{"-config", "x.yaml", "-redis", "redis://127.0.0.1:1", "-redis-mode", "batched", "-redis-deny-max-age", "1s"}, "-redis-deny-max-age 1s: bounds the deny cache of -redis-mode exact"},
		// The range the Redis backends take, named here rather than blamed on a rule.
		{[]string{"-config", "x.yaml", "-redis-timeout", "500us"}, "-redis-timeout 500us: must be in [1ms, 1m]"},
		{[]string{"-config", "x.yaml", "-redis-timeout", "1d"}, "-redis-timeout 1d: must be in [1ms, 1m]"},
		{[]string{"-config", "x.yaml", "-listen", ""}, "-listen: empty; give host:port"},
		// The proxy's duration parsing: a bare number gets the unit hint, and d is a day.
		{[]string{"-config", "x.yaml", "-reload-interval", "5"}, "-reload-interval 5: 5 has no unit: add a unit, like 5s"},
		{[]string{"-config", "x.yaml", "-redis-timeout", "60"}, "-redis-timeout 60: 60 has no unit: add a unit, like 60s"},
		{[]string{"-config", "x.yaml", "-shutdown-timeout", "10"}, "-shutdown-timeout 10: 10 has no unit: add a unit, like 10s"},
		{[]string{"-config", "x.yaml", "-shutdown-timeout", "-1s"}, "-shutdown-timeout -1s: must be positive, like 10s"},
		{[]string{"-config", "x.yaml", "-shutdown-timeout", "0"}, "-shutdown-timeout 0: must be positive, like 10s"},
		{[]string{"-config", "x.yaml", "-keepalive-time", "-1s"}, "-keepalive-time -1s: must be positive"},
		{[]string{"-config", "x.yaml", "-keepalive-timeout", "-1s"}, "-keepalive-timeout -1s: must be positive"},
		{[]string{"-config", "x.yaml", "-keepalive-min-ping-interval", "-1s"}, "-keepalive-min-ping-interval -1s: must be positive"},
		{[]string{"-config", "x.yaml", "-max-connection-age", "-1s"}, "-max-connection-age -1s: must be 0 (never) or positive"},
		{[]string{"-config", "x.yaml", "-max-streams", "0"}, "-max-streams 0: must be in [1, 4294967295]"},
		{[]string{"-config", "x.yaml", "-max-streams", "4294967296"}, "-max-streams 4294967296: must be in [1, 4294967295]"},
		{[]string{"-config", "x.yaml", "-max-header-bytes", "4095"}, "-max-header-bytes 4095: must be in [4096, 4294967295]"},
		{[]string{"-config", "x.yaml", "-max-header-bytes", "4294967296"}, "-max-header-bytes 4294967296: must be in [4096, 4294967295]"},
		{[]string{"-config", "x.yaml", "-max-detailed-series", "-1"}, "-max-detailed-series -1: must be in [0, 2147483647]"},
		{[]string{"-config", "x.yaml", "-listen", "bogus"}, `-listen "bogus": missing port in address`},
		{[]string{"-config", "x.yaml", "-listen", ":"}, `-listen ":": no port`},
		{[]string{"-config", "x.yaml", "-metrics-listen", "127.0.0.1:70000"}, `-metrics-listen "127.0.0.1:70000": port 70000 is out of range`},
		// The proxy's checks of the key counts, and neither with -redis (no in-process table).
		{[]string{"-config", "x.yaml", "-max-keys", "-1"}, "-max-keys -1: must be 0 (the default cap) or more"},
		{[]string{"-config", "x.yaml", "-expected-keys", "-1"}, "-expected-keys -1: must be 0 (tables that grow) or more"},
		{[]string{"-config", "x.yaml", "-expected-keys", "100000000"}, "-expected-keys 100000000: above the default key cap, 67108864 (raise -max-keys)"},
		{[]string{"-config", "x.yaml", "-max-keys", "1000", "-expected-keys", "1001"}, "-expected-keys 1001: above -max-keys 1000"},
		{[]string{"-config", "x.yaml", "-redis", "redis://127.0.0.1:1", "-max-keys", "10"}, "-max-keys 10: caps in-process limits, and with -redis there are none"},
		{[]string{"-config", "x.yaml", "-redis", "redis://127.0.0.1:1", "-expected-keys", "10"}, "-expected-keys 10: sizes in-process limits, and with -redis there are none"},
		// Flags only Redis reads, set without -redis: at their default value too, since setting
		// one says Redis was expected.
		{[]string{"-config", "x.yaml", "-on-redis-error", "closed"}, "-on-redis-error closed: needs -redis URL"},
		{[]string{"-config", "x.yaml", "-on-redis-error", "open"}, "-on-redis-error open: needs -redis URL"},
		{[]string{"-config", "x.yaml", "-redis-deny-max-age", "1s"}, "-redis-deny-max-age 1s: needs -redis URL"},
		{[]string{"-config", "x.yaml", "-redis-deny-max-age", "0"}, "-redis-deny-max-age 0s: needs -redis URL"},
		{[]string{"-config", "x.yaml", "-redis-timeout", "20ms"}, "-redis-timeout 20ms: needs -redis URL"},
		{[]string{"-config", "x.yaml", "-redis-mode", "exact"}, "-redis-mode exact: needs -redis URL"},
	} {
		out, code := runRLS(t, c.args...)
		require.Equal(t, exitUsage, code, out)
		require.Contains(t, out, c.want)
	}
}

// -redis-mode batched leases sliding-counter quota only: a config asking it for another policy is
// refused before Redis is dialled, as the proxy refuses -policy, not after a second of waiting
// for a Redis that does not answer (nothing listens on port 1).
func TestRLSBatchedRefusesOtherPoliciesBeforeDialling(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10, policy: gcra}\n"), 0o644))
	out, code := runRLS(t, "-config", file, "-listen", "127.0.0.1:0", "-redis", "redis://127.0.0.1:1/0", "-redis-mode", "batched")
	assert.Equal(t, exitFail, code, out)
	assert.Contains(t, out, "slidelimit rls: -config: "+file+": line 3: descriptor remote_address: -redis-mode batched: policy \"gcra\" is not available in batched mode; use sliding-counter, or -redis-mode exact")
	assert.NotContains(t, out, "does not answer", "Redis was dialled first")
}

// runRLS runs the command to completion and returns its combined output and exit code.
func runRLS(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"rls"}, args...)...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// rlsProc is one running "slidelimit rls".
var rlsListeningRE = regexp.MustCompile(`listening on (\S+), domains`)

func startRLS(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCommand(t, "rls", rlsListeningRE, args...)
}

func rlsClient(t *testing.T, addr string) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn
}

func rlsCall(t *testing.T, c rlsv3.RateLimitServiceClient, domain, key, value string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}})
	require.NoError(t, err)
	return r
}

// The command serves the limits of its config over gRPC, with health and metrics; an edit to the
// config applies while it runs; a broken edit is logged and changes nothing; SIGTERM stops it
// cleanly.
func TestRLSServesReloadsAndStops(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	write := func(perHour int) {
		body := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + strconv.Itoa(perHour) + "\n"
		require.NoError(t, os.WriteFile(file, []byte(body), 0o644))
	}
	write(2)
	p := startRLS(t, "-config", dir, "-metrics-listen", "127.0.0.1:0", "-reload-interval", "50ms", "-headers")
	c, conn := rlsClient(t, p.addr)

	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus())

	for range 2 {
		require.Equal(t, rlsv3.RateLimitResponse_OK, rlsCall(t, c, "edge", "remote_address", "198.51.100.1").GetOverallCode())
	}
	r := rlsCall(t, c, "edge", "remote_address", "198.51.100.1")
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode())
	require.NotEmpty(t, r.GetResponseHeadersToAdd())

	res, err := http.Get("http://" + p.metrics + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(body), `slidelimit_rls_over_limit_total{descriptor="remote_address",domain="edge"} 1`)

	write(4)
	deadline := time.Now().Add(failsafe)
	for rlsCall(t, c, "edge", "remote_address", "198.51.100.2").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 4 {
		require.True(t, time.Now().Before(deadline), "edit not applied:\n%s", p.stderr())
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: [remote_address]\n"), 0o644))
	for !strings.Contains(p.stderr(), "not applied, keeping the last good config: "+file+": line 3: key is a list, want a string") {
		require.True(t, time.Now().Before(deadline), "broken edit not logged:\n%s", p.stderr())
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, uint32(4), rlsCall(t, c, "edge", "remote_address", "198.51.100.3").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	// The package's own lines carry its name once, after the command's.
	assert.Regexp(t, `(?m)^slidelimit rls: \S+ \S+ config change in `+regexp.QuoteMeta(dir)+` not applied`, p.stderr())
	assert.NotContains(t, p.stderr(), "rls: rls:")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(failsafe):
		t.Fatalf("rls did not stop on SIGTERM:\n%s", p.stderr())
	}
	require.NoError(t, p.err, p.stderr())
	require.Contains(t, p.stderr(), "stopped")
}

// -max-detailed-series caps the series of detailed_metric values: past it, a new value's hits are
// counted under the descriptor's config path, and the command logs it once.
func TestRLSMaxDetailedSeries(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: path\n    detailed_metric: true\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n"), 0o644))
	p := startRLS(t, "-config", file, "-metrics-listen", "127.0.0.1:0", "-max-detailed-series", "1")
	c, _ := rlsClient(t, p.addr)
	for _, v := range []string{"/a", "/b", "/c", "/a"} {
		require.Equal(t, rlsv3.RateLimitResponse_OK, rlsCall(t, c, "edge", "path", v).GetOverallCode(), v)
	}
	res, err := http.Get("http://" + p.metrics + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(body), `slidelimit_rls_hits_total{descriptor="path_/a",domain="edge"} 2`)
	require.Contains(t, string(body), `slidelimit_rls_hits_total{descriptor="path",domain="edge"} 2`)
	require.NotContains(t, string(body), "path_/b")
	require.Equal(t, 1, strings.Count(p.stderr(), "detailed_metric: 1 series of request values reached"), p.stderr())
}

// -max-keys caps the keys of each rate limit: a new key beyond is OVER_LIMIT, with the policy's
// field but no remaining quota (none was judged), while a key tracked before keeps its quota.
func TestRLSMaxKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n"), 0o644))
	p := startRLS(t, "-config", file, "-max-keys", "2", "-expected-keys", "2", "-headers")
	assert.Contains(t, p.stderr(), "deciding in process (each rate limit: at most 2 keys, tables for 2 at start)")
	c, _ := rlsClient(t, p.addr)
	headers := func(r *rlsv3.RateLimitResponse) map[string]string {
		h := map[string]string{}
		for _, v := range r.GetResponseHeadersToAdd() {
			h[v.GetKey()] = v.GetValue()
		}
		return h
	}
	for _, ip := range []string{"198.51.100.1", "198.51.100.2"} {
		r := rlsCall(t, c, "edge", "remote_address", ip)
		require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode(), ip)
		assert.Regexp(t, `^"remote_address";r=9;t=\d+$`, headers(r)["RateLimit"], ip)
	}
	r := rlsCall(t, c, "edge", "remote_address", "198.51.100.3")
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.GetOverallCode(), "a third key past -max-keys 2")
	assert.Nil(t, r.GetStatuses()[0].GetDurationUntilReset(), "no time at which a key past the cap is admitted")
	h := headers(r)
	assert.Equal(t, `"remote_address";q=10;w=3600`, h["RateLimit-Policy"])
	assert.NotContains(t, h, "RateLimit", "a key-cap refusal tells the client its quota is spent")
	r = rlsCall(t, c, "edge", "remote_address", "198.51.100.1")
	require.Equal(t, rlsv3.RateLimitResponse_OK, r.GetOverallCode())
	assert.Regexp(t, `^"remote_address";r=8;t=\d+$`, headers(r)["RateLimit"])
}

// -expected-keys sizes the tables at start, so that a size the process cannot hold is refused
// then, rather than found by the kernel under load: a bad command line (exit 2) naming the flag,
// its value and the limit, and saying what to do, not an error in the config's first line. The
// Go memory limit is the one a test can set whatever the machine.
func TestRLSExpectedKeysBeyondTheMemoryLimit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "rls", "-config", file, "-listen", "127.0.0.1:0", "-expected-keys", "10000000")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=64MiB")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, exitUsage, ee.ExitCode(), "%s", out)
	assert.Regexp(t, `(?m)^slidelimit rls: -expected-keys 10000000: engine: WithExpectedKeys\(10000000\) needs \d+ MiB of tables at New, more than the Go memory limit, 64 MiB \(GOMEMLIMIT\); lower -expected-keys .*, or raise that limit$`, string(out))
	assert.NotContains(t, string(out), "-config:", "blamed on the config")
}

// SIGHUP reloads -config at once, with polling off (-reload-interval 0) too, and a broken edit is
// logged and changes nothing; it never stops the command.
func TestRLSReloadsOnSIGHUP(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	write := func(body string) { require.NoError(t, os.WriteFile(file, []byte(body), 0o644)) }
	limit := func(perHour int) string {
		return "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + strconv.Itoa(perHour) + "\n"
	}
	write(limit(2))
	p := startRLS(t, "-config", file, "-reload-interval", "0")
	c, _ := rlsClient(t, p.addr)
	perUnit := func() uint32 {
		return rlsCall(t, c, "edge", "remote_address", "198.51.100.1").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	require.Equal(t, uint32(2), perUnit())
	write(limit(5))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	deadline := time.Now().Add(failsafe)
	for !strings.Contains(p.stderr(), "config reloaded from "+file) {
		require.True(t, time.Now().Before(deadline), "SIGHUP did not reload:\n%s", p.stderr())
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, uint32(5), perUnit())
	write("domain: edge\ndescriptors:\n  - key: [remote_address]\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	for !strings.Contains(p.stderr(), "not applied, keeping the last good config") {
		require.True(t, time.Now().Before(deadline), "broken edit not logged:\n%s", p.stderr())
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, uint32(5), perUnit())
	select {
	case <-p.exited:
		t.Fatalf("SIGHUP stopped rls:\n%s", p.stderr())
	default:
	}
}

// With -redis, two processes share each limit.
func TestRLSRedisSharedLimit(t *testing.T) {
	addr, _ := startRedis(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 3}\n"), 0o644))
	// A deadline a loaded machine meets: the default 50ms would let the failure mode decide.
	a := startRLS(t, "-config", file, "-redis", "redis://"+addr+"/0", "-redis-timeout", "5s")
	b := startRLS(t, "-config", file, "-redis", "redis://"+addr+"/0", "-redis-mode", "exact", "-redis-timeout", "5s")
	ca, _ := rlsClient(t, a.addr)
	cb, _ := rlsClient(t, b.addr)
	codes := []rlsv3.RateLimitResponse_Code{}
	for i := range 4 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		codes = append(codes, rlsCall(t, c, "edge", "remote_address", "203.0.113.5").GetOverallCode())
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	require.Equal(t, []rlsv3.RateLimitResponse_Code{ok, ok, ok, over}, codes)
	require.Contains(t, a.stderr(), "deciding on Redis redis://"+addr+"/0 (exact)")
}

// With -redis-deny-max-age, a descriptor Redis refused is asked of Redis again once that much
// time has passed, so a FLUSHALL (or another replica's reset) is seen; without it the deny cache
// refuses until the retry time, the end of the day's window here.
func TestRLSRedisDenyMaxAge(t *testing.T) {
	addr, _ := startRedis(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 1}\n"), 0o644))
	bounded := startRLS(t, "-config", file, "-redis", "redis://"+addr+"/0", "-redis-timeout", "5s", "-redis-deny-max-age", "100ms")
	plain := startRLS(t, "-config", file, "-redis", "redis://"+addr+"/1", "-redis-timeout", "5s")
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	cb, _ := rlsClient(t, bounded.addr)
	cp, _ := rlsClient(t, plain.addr)
	for _, c := range []rlsv3.RateLimitServiceClient{cb, cp} {
		require.Equal(t, ok, rlsCall(t, c, "edge", "remote_address", "203.0.113.5").GetOverallCode())
		require.Equal(t, over, rlsCall(t, c, "edge", "remote_address", "203.0.113.5").GetOverallCode())
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.NoError(t, rdb.FlushAll(context.Background()).Err())
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, ok, rlsCall(t, cb, "edge", "remote_address", "203.0.113.5").GetOverallCode(), "past -redis-deny-max-age Redis decides, and it has lost the key")
	assert.Equal(t, over, rlsCall(t, cp, "edge", "remote_address", "203.0.113.5").GetOverallCode(), "without the flag the deny cache refuses until the retry time")
}

// With -redis-mode batched, two processes lease each limit's quota from one Redis and together
// admit exactly the limit.
func TestRLSBatchedSharedLimit(t *testing.T) {
	addr, _ := startRedis(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 5}\n"), 0o644))
	a := startRLS(t, "-config", file, "-redis", "redis://"+addr+"/0", "-redis-mode", "batched", "-redis-timeout", "5s")
	b := startRLS(t, "-config", file, "-redis", "redis://"+addr+"/0", "-redis-mode", "batched", "-redis-timeout", "5s")
	ca, _ := rlsClient(t, a.addr)
	cb, _ := rlsClient(t, b.addr)
	ok := 0
	for i := range 10 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		if rlsCall(t, c, "edge", "remote_address", "203.0.113.5").GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	require.Equal(t, 5, ok, "the fleet admits the limit, no more")
	require.Contains(t, a.stderr(), "deciding on Redis redis://"+addr+"/0 (batched)")
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

// A signal while the command is still starting (here, waiting on a Redis that does not answer)
// is handled as one after it listens: SIGTERM stops it with exit status 0, and SIGHUP does not
// stop it, rather than the signal's default action killing it.
func TestRLSSignalWhileStarting(t *testing.T) {
	srv := redisServer(t)
	require.NoError(t, srv.Pause()) // connections are accepted, nothing is answered
	t.Cleanup(func() { _ = srv.Resume() })
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644))
	start := func(t *testing.T) (*exec.Cmd, *bytes.Buffer, chan error) {
		cmd := exec.Command(binary, "rls", "-config", file, "-listen", "127.0.0.1:0", "-redis", "redis://"+srv.Addr+"/0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		time.Sleep(300 * time.Millisecond) // past the runtime's start, before the Redis wait ends
		return cmd, &stderr, done
	}
	wait := func(t *testing.T, done chan error, stderr *bytes.Buffer) {
		select {
		case err := <-done:
			require.NoError(t, err, "exit status:\n%s", stderr.String())
		case <-time.After(failsafe):
			t.Fatalf("rls did not stop:\n%s", stderr.String())
		}
	}
	t.Run("SIGTERM", func(t *testing.T) {
		cmd, stderr, done := start(t)
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		wait(t, done, stderr)
		assert.Contains(t, stderr.String(), "stopped before listening")
	})
	t.Run("SIGHUP", func(t *testing.T) {
		cmd, stderr, done := start(t)
		require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
		select {
		case err := <-done:
			t.Fatalf("SIGHUP during start-up stopped rls (%v):\n%s", err, stderr.String())
		case <-time.After(4 * time.Second): // the discovery (2 s) and first ping (1 s) are over
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		wait(t, done, stderr)
	})
}

// -max-streams and -max-header-bytes are what the server tells each connection it may have in
// progress at once and send as one call's headers (its HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS and
// SETTINGS_MAX_HEADER_LIST_SIZE), 100 and 64 KiB unless set: without the first, a client that sent
// calls and never read the answers held every answer in the server's memory, and gRPC's own bound
// on headers is 16 MiB a call.
func TestRLSMaxStreams(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n"), 0o644))
	for _, c := range []struct {
		args             []string
		streams, headers uint32
	}{
		{nil, 100, 65536},
		{[]string{"-max-streams", "3", "-max-header-bytes", "4096"}, 3, 4096},
	} {
		p := startRLS(t, append([]string{"-config", file, "-listen", "127.0.0.1:0"}, c.args...)...)
		conn, fr := dialH2(t, p.addr, failsafe)
		var s *http2.SettingsFrame
		for s == nil {
			f, err := fr.ReadFrame()
			require.NoError(t, err)
			if sf, isSettings := f.(*http2.SettingsFrame); isSettings && !sf.IsAck() {
				s = sf
			}
		}
		conn.Close()
		for _, want := range []struct {
			id  http2.SettingID
			val uint32
		}{{http2.SettingMaxConcurrentStreams, c.streams}, {http2.SettingMaxHeaderListSize, c.headers}} {
			got, ok := s.Value(want.id)
			assert.True(t, ok, "%v: the server's SETTINGS set no %v", c.args, want.id)
			assert.Equal(t, want.val, got, "%v: %v", c.args, want.id)
		}
	}
	// The smallest -max-header-bytes still serves a gRPC client's call.
	p := startRLS(t, "-config", file, "-listen", "127.0.0.1:0", "-max-header-bytes", "4096")
	client, _ := rlsClient(t, p.addr)
	res := rlsCall(t, client, "edge", "remote_address", "10.0.0.1")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
}

// A stop signal during the graceful shutdown cuts off the calls in flight at once, as in the
// proxy, instead of waiting out -shutdown-timeout; the exit status is still 0. The call in flight
// is one whose request message never comes: its handler waits for it, and the graceful stop waits
// for the handler.
func TestRLSSecondSignalCutsOff(t *testing.T) {
	p := startRLS(t, "-config", edgeConfig(t), "-shutdown-timeout", "1m")
	_, fr := dialH2(t, p.addr, 2*failsafe)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {Name: ":authority", Value: "rls"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}} {
		require.NoError(t, enc.WriteField(f))
	}
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}))
	// The server reads a connection's frames in order: once it answers the ping, it has opened
	// the call.
	require.NoError(t, fr.WritePing(false, [8]byte{1}))
	for {
		f, err := fr.ReadFrame()
		require.NoError(t, err)
		if ping, ok := f.(*http2.PingFrame); ok && ping.IsAck() {
			break
		}
	}

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	// The graceful stop has begun once the listener is closed.
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, failsafe, 20*time.Millisecond)
	select {
	case <-p.exited:
		t.Fatalf("rls exited with a call in flight before its -shutdown-timeout:\n%s", p.stderr())
	case <-time.After(200 * time.Millisecond):
	}
	// Said when the shutdown begins, while the call still runs: a log that said nothing until the
	// calls were done looked hung.
	waitFor(t, func() bool {
		return strings.Contains(p.stderr(), "shutting down: calls in flight have up to 1m0s to finish")
	})
	// Well before -shutdown-timeout ends, which the failsafe is half of.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(failsafe):
		t.Fatalf("rls did not stop on a second SIGTERM:\n%s", p.stderr())
	}
	require.NoError(t, p.err, p.stderr())
	assert.Contains(t, p.stderr(), "a second stop signal: cutting off the calls in flight")
	assert.Contains(t, p.stderr(), "stopped")
}

// dialH2 opens a bare HTTP/2 connection to addr, closed at the test's end, that must be done with
// within d: the client preface and its SETTINGS are sent, nothing is read.
func dialH2(t *testing.T, addr string, d time.Duration) (net.Conn, *http2.Framer) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, failsafe)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(d)))
	_, err = io.WriteString(conn, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(conn, conn)
	require.NoError(t, fr.WriteSettings())
	return conn, fr
}
