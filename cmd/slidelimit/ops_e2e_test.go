package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// headerUpstream records the headers and host of every request that reaches it.
type headerUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newHeaderUpstream(t *testing.T) *headerUpstream {
	u := &headerUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		u.mu.Lock()
		u.seen = append(u.seen, h)
		u.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *headerUpstream) last() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[len(u.seen)-1]
}

// From a trusted load balancer, X-Forwarded-Proto, X-Forwarded-Host, Forwarded and X-Real-IP
// reach the upstream as the balancer wrote them, the chains extended by this hop. From anyone
// else, the client-address headers are dropped and the forwarding headers say what this proxy
// saw. Their underscore spellings, which CGI and WSGI servers read as the same variables, are
// dropped from both.
func TestProxyForwardingHeaders(t *testing.T) {
	up := newHeaderUpstream(t)
	sent := map[string]string{
		"X-Forwarded-For":   "203.0.113.5",
		"X-Forwarded-Proto": "https",
		"X-Forwarded-Host":  "shop.example",
		"Forwarded":         `for=203.0.113.5;host=shop.example;proto=https`,
		"X-Real-Ip":         "203.0.113.5",
		"True-Client-Ip":    "203.0.113.5",
		"X_Real_IP":         "6.6.6.6",
		"X_FORWARDED_FOR":   "6.6.6.6",
		"X-Forwarded_Host":  "evil.example",
		"Cf_Connecting_Ip":  "6.6.6.6",
		"X_Api_Key":         "kept",
	}
	underscored := func(h http.Header) []string {
		var names []string
		for name := range h {
			if strings.Contains(name, "_") {
				names = append(names, name)
			}
		}
		return names
	}
	trusted := startProxy(t, "-upstream", up.URL, "-trusted-proxies", "127.0.0.1")
	c := newClient(t, false)
	require.Equal(t, 200, do(t, c, trusted.url("/"), sent).status)
	h := up.last()
	host := trusted.addr
	assert.Equal(t, "203.0.113.5, 127.0.0.1", h.Get("X-Forwarded-For"))
	assert.Equal(t, "https", h.Get("X-Forwarded-Proto"))
	assert.Equal(t, "shop.example", h.Get("X-Forwarded-Host"))
	assert.Equal(t, `for=203.0.113.5;host=shop.example;proto=https, for=127.0.0.1;host="`+host+`";proto=http`, h.Get("Forwarded"))
	assert.Equal(t, "203.0.113.5", h.Get("X-Real-Ip"))
	assert.Equal(t, "203.0.113.5", h.Get("True-Client-Ip"))
	assert.Equal(t, []string{"X_api_key"}, underscored(h), "only a header that is no forwarding header keeps its underscores")

	// Headers the balancer lists in Connection were for its hop alone (RFC 9110, 7.6.1): none is
	// passed on, and each chain starts at this hop.
	hop := maps.Clone(sent)
	hop["Connection"] = "X-Forwarded-Proto, x-forwarded-for,Forwarded , X-Forwarded-Host, X-Real-IP"
	require.Equal(t, 200, do(t, c, trusted.url("/"), hop).status)
	h = up.last()
	assert.Equal(t, "127.0.0.1", h.Get("X-Forwarded-For"))
	assert.Equal(t, "http", h.Get("X-Forwarded-Proto"))
	assert.Equal(t, host, h.Get("X-Forwarded-Host"))
	assert.Equal(t, `for=127.0.0.1;host="`+host+`";proto=http`, h.Get("Forwarded"))
	assert.Empty(t, h.Values("X-Real-Ip"))
	assert.Equal(t, "203.0.113.5", h.Get("True-Client-Ip"), "a header Connection does not list is kept")

	untrusted := startProxy(t, "-upstream", up.URL)
	require.Equal(t, 200, do(t, c, untrusted.url("/"), sent).status)
	h = up.last()
	assert.Equal(t, "127.0.0.1", h.Get("X-Forwarded-For"))
	assert.Equal(t, "http", h.Get("X-Forwarded-Proto"))
	assert.Equal(t, untrusted.addr, h.Get("X-Forwarded-Host"))
	assert.Equal(t, `for=127.0.0.1;host="`+untrusted.addr+`";proto=http`, h.Get("Forwarded"))
	assert.Empty(t, h.Values("X-Real-Ip"), "a forged X-Real-IP never reaches the upstream")
	assert.Empty(t, h.Values("True-Client-Ip"))
	assert.Equal(t, []string{"X_api_key"}, underscored(h))
}

// With -forwarded-header forwarded, clients are told apart by the trusted proxy's Forwarded
// field, and the upstream gets that field with this hop appended.
func TestProxyForwardedHeaderMode(t *testing.T) {
	up := newHeaderUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-trusted-proxies", "127.0.0.1", "-forwarded-header", "forwarded", "-limit", "1", "-window", "1h")
	c := newClient(t, true)
	fwd := func(v string) int { return do(t, c, p.url("/"), map[string]string{"Forwarded": v}).status }
	assert.Equal(t, 200, fwd(`for="[2001:db8::1]";proto=https`))
	assert.Equal(t, `for="[2001:db8::1]";proto=https, for=127.0.0.1;host="`+p.addr+`";proto=http`, up.last().Get("Forwarded"))
	assert.Equal(t, 429, fwd(`for="[2001:db8::2]"`), "the same /64")
	assert.Equal(t, 200, fwd(`for=203.0.113.7`))
	// A quote the inbound value leaves open is closed before this hop's element, so that an
	// upstream reading the line from the left still finds that element whole.
	assert.Equal(t, 200, fwd(`for=198.51.100.1;x="`))
	assert.Equal(t, `for=198.51.100.1;x="", for=127.0.0.1;host="`+p.addr+`";proto=http`, up.last().Get("Forwarded"))
	// The load balancer appended its element to a client's line that left a quote open: the quote
	// is closed at the end of the client's element, so both elements stay whole for the upstream.
	assert.Equal(t, 200, fwd(`for=6.6.6.6;x=", for=198.51.100.3`))
	assert.Equal(t, `for=6.6.6.6;x="", for=198.51.100.3, for=127.0.0.1;host="`+p.addr+`";proto=http`, up.last().Get("Forwarded"))
	assert.Equal(t, 200, fwd(`for=198.51.100.2;x="a\`))
	assert.Equal(t, `for=198.51.100.2;x="a\\", for=127.0.0.1;host="`+p.addr+`";proto=http`, up.last().Get("Forwarded"))
}

// SIGHUP never stops the proxy: without -config it says there is nothing to reload, and a
// request in flight finishes.
func TestProxySIGHUPWithoutConfig(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			once.Do(func() { close(entered) })
			<-release
		}
		io.WriteString(w, "done")
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "-upstream", up.URL)
	c := newClient(t, false)
	got := make(chan resp, 1)
	go func() {
		res, err := c.Get(p.url("/slow"))
		if err != nil {
			got <- resp{body: err.Error()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		got <- resp{status: res.StatusCode, body: string(b)}
	}()
	<-entered
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "nothing to reload") })
	close(release)
	assert.Equal(t, resp{status: 200, body: "done"}, <-got)
	assert.Equal(t, 200, do(t, c, p.url("/"), nil).status, "still serving")
	select {
	case <-p.exited:
		t.Fatal("SIGHUP stopped the proxy")
	default:
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failsafe)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met in time")
		time.Sleep(10 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// Per-route rules from -config, exemptions, and reloads: SIGHUP and a change to the file swap in
// a new configuration, a bad file keeps the last good one and says why, and a limit the reload
// keeps keeps its counts.
func TestProxyConfigAndReload(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rules.yaml")
	writeFile(t, cfg, `
exempt:
  paths: [/healthz]
rules:
  - name: login
    methods: [POST]
    paths: [/login]
    rates: [2/1h]
  - name: search
    paths: [/search]
    rates: [1/1h]
    key: header:X-Api-Key
`)
	p := startProxy(t, "-upstream", up.URL, "-limit", "3", "-window", "1h", "-config", cfg, "-config-poll", "50ms", "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	post := func(path string) resp {
		res, err := c.Post(p.url(path), "text/plain", strings.NewReader("x"))
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return resp{res.StatusCode, string(b), res.Header.Get("RateLimit-Policy"), res.Header.Get("RateLimit"), res.Header.Get("Retry-After")}
	}
	assert.Equal(t, []int{200, 200, 429}, []int{post("/login").status, post("/login").status, post("/login").status})
	assert.Equal(t, `"login";q=2;w=3600`, post("/login").policy)
	assert.Equal(t, 200, do(t, c, p.url("/login"), nil).status, "GET /login is not the login rule")
	key := func(v string) int { return do(t, c, p.url("/search?q=1"), map[string]string{"X-Api-Key": v}).status }
	assert.Equal(t, []int{200, 429, 200}, []int{key("a"), key("a"), key("b")})
	for range 5 {
		r := do(t, c, p.url("/healthz"), nil)
		assert.Equal(t, resp{status: 200, body: "upstream saw /healthz"}, r, "exempt: no limit, no fields")
	}

	// A bad file: the last good configuration stays, and the log says why.
	writeFile(t, cfg, "rules:\n  - name: login\n    rates: [2/1h]\n    colour: blue\n")
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "config reload failed") })
	assert.Contains(t, p.stderr(), `line 4: rules[0] (login): unknown field \"colour\"`)
	assert.Equal(t, 429, post("/login").status, "still the login rule, still counting")

	// SIGHUP with a bad file: the same, and the proxy lives.
	writeFile(t, cfg, "rules: [")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Count(p.stderr(), "config reload failed") >= 2 })

	// A good file again: login keeps its count (same name and limit), search is gone (so its
	// requests fall to the command line's 3/1h), and /healthz is no longer exempt.
	writeFile(t, cfg, "rules:\n  - name: login\n    methods: [POST]\n    paths: [/login]\n    rates: [2/1h]\n")
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "config reloaded") })
	assert.Equal(t, 429, post("/login").status, "the kept limit kept its count")
	assert.Equal(t, `"default";q=3;w=3600`, do(t, c, p.url("/healthz"), nil).policy)
	m := do(t, c, "http://"+p.metrics+"/metrics", nil).body
	// 2 or 3: the poller may see the second bad file before the signal arrives.
	assert.Regexp(t, `slidelimit_config_reloads_total\{result="error"\} [23]\n`, m)
	assert.Contains(t, m, `slidelimit_config_reloads_total{result="ok"} 1`)
	assert.Contains(t, m, `slidelimit_decisions_total{decision="denied",reason="limited",rule="login"}`)
	assert.Contains(t, m, `slidelimit_decisions_total{decision="allowed",reason="ok",rule="search"} 2`)
	assert.Contains(t, m, `slidelimit_exempt_total{why="path"} 5`)
	assert.Contains(t, m, `slidelimit_rules 2`)
	select {
	case <-p.exited:
		t.Fatal("a reload stopped the proxy")
	default:
	}
}

// A -config file that goes away while polled keeps the last good configuration and counts as a
// failed reload, as a SIGHUP in the same state does; the file coming back reloads it.
func TestProxyConfigFileRemovedCountsAsFailedReload(t *testing.T) {
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, "rules:\n  - name: one\n    paths: [/one]\n    rates: [1/1h]\n")
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "20ms", "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	// The poller may start after the proxy says it listens: a reload it has done shows it has
	// seen the file, and so will notice it go.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "config reloaded") })
	require.NoError(t, os.Remove(cfg))
	// Logged as a SIGHUP's failed reload is (it said "config file unreadable" before), so that
	// one alert on the README's line finds both.
	waitFor(t, func() bool {
		return strings.Contains(p.stderr(), `config reload failed; keeping the last good configuration" config=`+cfg+` trigger="file gone"`)
	})
	reloads := func(result string) float64 {
		m := do(t, c, "http://"+p.metrics+"/metrics", nil).body
		return metric(t, m, regexp.QuoteMeta(`slidelimit_config_reloads_total{result="`+result+`"}`))
	}
	assert.Equal(t, 1.0, reloads("error"))
	assert.Equal(t, `"one";q=1;w=3600`, do(t, c, p.url("/one"), nil).policy, "the last good configuration")
	writeFile(t, cfg, "rules:\n  - name: one\n    paths: [/one]\n    rates: [1/1h]\n")
	waitFor(t, func() bool { return strings.Count(p.stderr(), "config reloaded") == 2 })
	assert.Equal(t, 1.0, reloads("error"), "counted once, not at every poll")
	assert.Equal(t, 2.0, reloads("ok"))
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

// A SIGHUP that comes with the stop signal reloads before the proxy says it stopped, or not at all:
// nothing is logged after "stopped". The race is narrow, so it is run several times.
func TestProxyNoReloadAfterStopped(t *testing.T) {
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, "rules:\n  - name: one\n    paths: [/one]\n    rates: [1/1h]\n")
	for i := range 8 {
		p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0")
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		for range 3 {
			_ = p.cmd.Process.Signal(syscall.SIGHUP) // fails once the process is gone
		}
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Fatal("the proxy did not stop")
		}
		log := p.stderr()
		at := strings.Index(log, "stopped")
		require.GreaterOrEqual(t, at, 0, "run %d: no \"stopped\" line:\n%s", i, log)
		assert.NotContains(t, log[at:], "config reloaded", "run %d: a reload logged after stopped:\n%s", i, log)
	}
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

// The private metrics listener: per-rule decisions, the decision-latency histogram and
// build_info; the public listener forwards /metrics to the upstream.
func TestProxyMetricsListener(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "2", "-window", "1h", "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	do(t, c, p.url("/"), nil)
	assert.Equal(t, "upstream saw /metrics", do(t, c, p.url("/metrics"), nil).body, "limited like any path, and forwarded")
	do(t, c, p.url("/"), nil)
	m := do(t, c, "http://"+p.metrics+"/metrics", nil).body
	assert.Contains(t, m, `slidelimit_decisions_total{decision="allowed",reason="ok",rule="default"} 2`)
	assert.Contains(t, m, `slidelimit_decisions_total{decision="denied",reason="limited",rule="default"} 1`)
	assert.Regexp(t, `(?m)^slidelimit_decision_duration_seconds_count\{rule="default"\} 3$`, m)
	assert.Regexp(t, `(?m)^slidelimit_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`, m)
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

// A sampled access log in slog's format: rule, decision, status and the key hashed, never the
// client's address.
func TestProxyAccessLog(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-log-admitted", "1", "-log-refused", "2", "-trusted-proxies", "127.0.0.1", "-log-format", "json")
	c := newClient(t, true)
	for range 4 {
		do(t, c, p.url("/x"), map[string]string{"X-Forwarded-For": "198.51.100.77"})
	}
	waitFor(t, func() bool { return strings.Count(p.stderr(), `"msg":"request"`) == 3 })
	var lines []map[string]any
	for _, l := range strings.Split(p.stderr(), "\n") {
		if strings.Contains(l, `"msg":"request"`) {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m))
			lines = append(lines, m)
		}
	}
	// One admitted (all of them logged), three refused (one in two: the first and the third).
	require.Len(t, lines, 3)
	assert.Equal(t, []any{"allowed", "denied", "denied"}, []any{lines[0]["decision"], lines[1]["decision"], lines[2]["decision"]})
	assert.Equal(t, []any{200.0, 429.0, 429.0}, []any{lines[0]["status"], lines[1]["status"], lines[2]["status"]})
	assert.Equal(t, "default", lines[1]["rule"])
	assert.Regexp(t, `^hmac:[0-9a-f]{12}$`, lines[1]["key"])
	assert.Equal(t, lines[0]["key"], lines[1]["key"])
	assert.NotContains(t, p.stderr(), "198.51.100.77")
}

// The access log's key is keyed with a secret of the process: one client has one value in every
// line of a run, so that its lines can be told apart, but a plain hash of its key (the same in
// every process) could be reversed by hashing every IPv4 address. Two proxies, each with its own
// secret, give the same client different values.
func TestProxyAccessLogKeyIsKeyedPerProcess(t *testing.T) {
	up := newUpstream(t)
	c := newClient(t, true)
	keyRE := regexp.MustCompile(`msg=request .* key=(\S+) `)
	var keys []string
	for range 2 {
		p := startProxy(t, "-upstream", up.URL, "-log-admitted", "1", "-trusted-proxies", "127.0.0.1")
		for range 2 {
			require.Equal(t, 200, do(t, c, p.url("/"), map[string]string{"X-Forwarded-For": "198.51.100.77"}).status)
		}
		waitFor(t, func() bool { return len(keyRE.FindAllStringSubmatch(p.stderr(), -1)) == 2 })
		m := keyRE.FindAllStringSubmatch(p.stderr(), -1)
		assert.Regexp(t, `^hmac:[0-9a-f]{12}$`, m[0][1])
		assert.Equal(t, m[0][1], m[1][1], "one client, two values in one run")
		keys = append(keys, m[0][1])
	}
	assert.NotEqual(t, keys[0], keys[1], "the same value in two processes: an unkeyed hash")
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

// Trusting every address is allowed but loud.
func TestProxyTrustEverythingWarns(t *testing.T) {
	p := startProxy(t, "-upstream", "http://127.0.0.1:1", "-trusted-proxies", "0.0.0.0/0")
	assert.Regexp(t, `level=WARN msg="WARNING: -trusted-proxies 0\.0\.0\.0/0 trusts a large part of the Internet`, p.stderr())
}

// -exempt-paths, -problem-json and -max-delay.
func TestProxyExemptProblemDelay(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-exempt-paths", "/healthz", "-problem-json")
	c := newClient(t, true)
	for range 3 {
		assert.Equal(t, 200, do(t, c, p.url("/healthz"), nil).status)
	}
	assert.Equal(t, 200, do(t, c, p.url("/"), nil).status)
	res, err := c.Get(p.url("/"))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, 429, res.StatusCode)
	assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"rate limit exceeded","violated-policies":["default"]}`, string(body))

	// One request per 50 ms, burst 1: without a delay the second of three back-to-back
	// requests is refused; with -max-delay 1s each waits its turn.
	strict := startProxy(t, "-upstream", up.URL, "-policy", "gcra", "-rate", "1/50ms")
	delayed := startProxy(t, "-upstream", up.URL, "-policy", "gcra", "-rate", "1/50ms", "-max-delay", "1s")
	var s, d []int
	for range 3 {
		s = append(s, do(t, c, strict.url("/"), nil).status)
	}
	for range 3 {
		d = append(d, do(t, c, delayed.url("/"), nil).status)
	}
	assert.Equal(t, 429, s[1])
	assert.Equal(t, []int{200, 200, 200}, d)

	// -max-waiting 1: of three requests over the limit at once, one waits its turn (about 1 s)
	// and two are refused at once instead of waiting.
	bounded := startProxy(t, "-upstream", up.URL, "-policy", "gcra", "-rate", "1/1s", "-max-delay", "5s", "-max-waiting", "1")
	require.Equal(t, 200, do(t, c, bounded.url("/"), nil).status)
	type result struct {
		status int
		took   time.Duration
	}
	results := make(chan result, 3)
	for range 3 {
		go func() {
			start := time.Now()
			st := do(t, c, bounded.url("/"), nil).status
			results <- result{st, time.Since(start)}
		}()
	}
	var waited, refusedAtOnce int
	for range 3 {
		switch r := <-results; {
		case r.status == 200 && r.took >= 900*time.Millisecond:
			waited++
		case r.status == 429 && r.took < 500*time.Millisecond:
			refusedAtOnce++
		default:
			t.Errorf("status %d after %v", r.status, r.took)
		}
	}
	assert.Equal(t, 1, waited)
	assert.Equal(t, 2, refusedAtOnce)
}

// The command line: the commands list, version, and flag errors that say what to write.
func TestCommandLine(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"--help"}} {
		cmd := exec.Command(binary, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%v", args)
		for _, want := range []string{"slidelimit proxy [flags]", "slidelimit rls [flags]       Envoy rate limit service (see rls -h)", "slidelimit version", "slidelimit load"} {
			assert.Contains(t, stdout.String(), want, "%v", args)
		}
		assert.NotContains(t, stdout.String()+stderr.String(), "-keys", "%v: the commands, not the benchmark's flags", args)
	}
	out, err := exec.Command(binary, "version").Output()
	require.NoError(t, err)
	assert.Regexp(t, `^slidelimit \S+\nrevision \S+.*\ngo1\.\S+ \w+/\w+\n$`, string(out))

	cmd := exec.Command(binary, "proxy", "-upstream", "http://127.0.0.1:1", "-window", "60")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	require.Error(t, err)
	assert.Equal(t, "slidelimit proxy: -window 60: 60 has no unit: add a unit, like 60s\nRun \"slidelimit proxy -h\" for the flags.\n", stderr.String())
}

func TestVersionOverride(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v9.8.7"
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitOK, run([]string{"version"}, &stdout, &stderr))
	assert.True(t, strings.HasPrefix(stdout.String(), "slidelimit v9.8.7\n"), stdout.String())
	stdout.Reset()
	assert.Equal(t, exitOK, run([]string{"--version"}, &stdout, &stderr))
	assert.Regexp(t, regexp.MustCompile(`^slidelimit v9\.8\.7\n`), stdout.String())
}

// What the reverse proxy logs goes through the command's log in its format: an upstream that
// cuts its body short is a JSON line at ERROR with -log-format json, not a plain line beside them.
func TestProxyUpstreamErrorsInTheLogFormat(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100))
		buf.Flush()
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "-upstream", up.URL, "-log-format", "json")
	c := newClient(t, true)
	res, err := c.Get(p.url("/short"))
	if err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "ReverseProxy read error during body copy") })
	for _, l := range strings.Split(strings.TrimSpace(p.stderr()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "a line outside the log format: %q", l)
		if strings.Contains(l, "ReverseProxy read error") {
			assert.Equal(t, "ERROR", m["level"])
		}
	}
}

// apiRule is a config of one rule, api, for the paths under /api/: its rates, then more lines.
func apiRule(rates, more string) string {
	return "rules:\n  - name: api\n    paths: [/api/]\n    rates: [" + rates + "]\n" + more
}

// A reload that gives a rule a second rate, or takes it away, renames the rule's first limit in
// the fields ("api" becomes "api-1h") but keeps its counts: the exhausted client stays refused.
func TestProxyReloadKeepsCountsAcrossRenames(t *testing.T) {
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	rule := func(rates string) string { return apiRule(rates, "") }
	writeFile(t, cfg, rule("3/1h, 100/1d"))
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0")
	c := newClient(t, true)
	get := func() resp { return do(t, c, p.url("/api/x"), nil) }
	assert.Equal(t, []int{200, 200, 200, 429}, []int{get().status, get().status, get().status, get().status})
	reloads := 0
	for _, rates := range []string{"3/1h", "3/1h, 200/1d"} {
		writeFile(t, cfg, rule(rates))
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
		reloads++
		waitFor(t, func() bool { return strings.Count(p.stderr(), "config reloaded") == reloads })
		r := get()
		assert.Equal(t, 429, r.status, "rates %s: the 1h limit kept its count", rates)
		assert.Contains(t, r.rateLimit, "r=0", "rates %s", rates)
	}
	assert.Equal(t, `"api-1h";q=3;w=3600, "api-1d";q=200;w=86400`, get().policy, "the fields use the new names")
}

// A request waiting for its turn under -max-delay when a reload retires its limiter is still
// decided by that limiter, not forwarded uncounted: the retired limiter is closed only after
// -shutdown-timeout plus -max-delay.
func TestProxyRetiredLimiterOutlivesWaiters(t *testing.T) {
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	rule := func(rates string) string { return apiRule(rates, "    policy: sliding-log\n") }
	writeFile(t, cfg, rule("1/2s"))
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0", "-max-delay", "3s", "-shutdown-timeout", "500ms", "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	assert.Equal(t, 200, do(t, c, p.url("/api/x"), nil).status)
	waited := make(chan resp, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, p.url("/api/x"), nil)
		res, err := c.Do(req)
		if err != nil {
			waited <- resp{status: -1, body: err.Error()}
			return
		}
		defer res.Body.Close()
		waited <- resp{status: res.StatusCode, rateLimit: res.Header.Get("RateLimit")}
	}()
	time.Sleep(500 * time.Millisecond) // the second request is waiting for its turn (it waits until 2s)
	writeFile(t, cfg, rule("5/2s"))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "config reloaded") })
	r := <-waited
	assert.Equal(t, 200, r.status, r.body)
	assert.Equal(t, `"api";r=0;t=2`, r.rateLimit, "decided by the retired limiter, which was still open")
	m := do(t, c, "http://"+p.metrics+"/metrics", nil).body
	assert.Contains(t, m, "slidelimit_limiter_errors_total 0")
	assert.Contains(t, m, `slidelimit_decisions_total{decision="allowed",reason="ok",rule="api"} 2`)
}

// -idle-timeout: the proxy closes a client's keep-alive connection once it has been idle that
// long (http.Server's IdleTimeout; without one an idle connection stayed open for ever).
func TestProxyClosesIdleConnections(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-idle-timeout", "300ms")
	conn, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer conn.Close()
	br := bufio.NewReader(conn)
	for range 2 { // the connection is kept alive between requests
		_, err = fmt.Fprintf(conn, "GET /x HTTP/1.1\r\nHost: %s\r\n\r\n", p.addr)
		require.NoError(t, err)
		res, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, 200, res.StatusCode)
		assert.False(t, res.Close)
	}
	// Idle now: the server closes the connection after about 300ms, well before the failsafe.
	idle := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(failsafe)))
	_, err = br.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the proxy closed the idle connection")
	assert.Less(t, time.Since(idle), 10*time.Second)
	assert.GreaterOrEqual(t, time.Since(idle), 250*time.Millisecond)

	out, code := runProxy(t, "-listen", "127.0.0.1:0", "-upstream", up.URL, "-idle-timeout", "0s")
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, "slidelimit proxy: -idle-timeout 0s: must be positive, like 120s")
}

// A -config file caught empty (an editor's truncate before its write) is a failed reload: the last
// good configuration stays, with its counts, and the error is logged; the file written whole is
// then reloaded. An empty file used to be applied, dropping the rule and its counts.
func TestProxyEmptiedConfigKeepsTheLastGood(t *testing.T) {
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, apiRule("3/1h", ""))
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0")
	c := newClient(t, true)
	get := func() int { return do(t, c, p.url("/api/x"), nil).status }
	assert.Equal(t, []int{200, 200, 200, 429}, []int{get(), get(), get(), get()})
	writeFile(t, cfg, "")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool {
		return strings.Contains(p.stderr(), "config reload failed; keeping the last good configuration")
	})
	assert.Contains(t, p.stderr(), "no rules and no exemptions")
	assert.Equal(t, 429, get(), "the rule and its count are kept")
	writeFile(t, cfg, apiRule("3/1h", ""))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Count(p.stderr(), "config reloaded") == 1 })
	assert.Equal(t, 429, get(), "the unchanged rule keeps its count")
}

// The access log's retry_after_ms is the wait the client was sent: with -rate 1/10s and 1/1h, the
// second request is refused by the 10 s limit, but the hour's limit, not asked and also spent, has
// the longer wait, which Retry-After gives; the log said the 10 s limit's.
func TestProxyAccessLogGivesTheWaitSent(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-rate", "1/10s", "-rate", "1/1h", "-log-refused", "1")
	c := newClient(t, true)
	require.Equal(t, 200, do(t, c, p.url("/x"), nil).status)
	r := do(t, c, p.url("/x"), nil)
	require.Equal(t, 429, r.status)
	secs, err := strconv.Atoi(r.retryAfter)
	require.NoError(t, err)
	require.Greater(t, secs, 10, "the hour's wait: %q", r.retryAfter)
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "msg=request") })
	assert.Contains(t, p.stderr(), "retry_after_ms="+strconv.Itoa(secs*1000)+" ", p.stderr())
}

// failingWriter fails every write, as a full disk or a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// Output that could not be written is a failure, exit 1, said on stderr.
func TestUnwrittenOutputFails(t *testing.T) {
	// The built-in benchmark too: it exited 0 with its report unwritten.
	for _, args := range [][]string{{"version"}, {"-h"}, {"help"}, {"help", "proxy"}, {"help", "version"},
		{"-keys", "1000", "-duration", "10ms"}, {"-keys", "1000", "-duration", "10ms", "-reference=false"}} {
		var stderr bytes.Buffer
		assert.Equal(t, exitFail, run(args, failingWriter{}, &stderr), "%v", args)
		assert.Contains(t, stderr.String(), "no space left on device", "%v", args)
	}
}

// A bad value gets one line, whatever it holds: the errors that quote a value as given (a file's
// path, the -upstream hint) printed a newline in it as a line of its own, which reads as another
// message, and sent escape sequences to the terminal as they were.
func TestErrorsStayOnOneLine(t *testing.T) {
	for _, tc := range []struct {
		command string
		args    []string
		want    string
	}{
		{"proxy", []string{"-upstream", "127.0.0.1:9\nlevel=ERROR forged"}, `like http://127.0.0.1:9\nlevel=ERROR forged`},
		{"proxy", []string{"-upstream", "h\xff\x1b[31mred"}, `like http://h\xff\x1b[31mred`},
		{"proxy", []string{"-upstream", "h\u2028level=ERROR forged"}, `like http://h\u2028level=ERROR forged`},
		{"proxy", []string{"-upstream", "http://127.0.0.1:9", "-config", "no\nsuch"}, `-config stat no\nsuch: no such file`},
		{"proxy", []string{"-upstream", "http://127.0.0.1:9", "-tls-client-ca", "x\ny"}, `-tls-client-ca x\ny: needs -tls-cert`},
		{"rls", []string{"-listen", "127.0.0.1:0", "-config", "no\nsuch"}, `-config: no\nsuch: stat: no such file`},
	} {
		var out string
		var code int
		if tc.command == "proxy" {
			out, code = runProxy(t, tc.args...)
		} else {
			out, code = runRLS(t, tc.args...)
		}
		assert.NotEqual(t, 0, code, "%q", tc.args)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		assert.Contains(t, lines[0], tc.want, "%q", tc.args)
		for _, l := range lines[1:] {
			assert.True(t, strings.HasPrefix(l, "Run "), "%q: a line of its own: %q", tc.args, l)
		}
		assert.NotContains(t, out, "\x1b", "%q", tc.args)
		assert.NotContains(t, out, "\u2028", "%q", tc.args)
	}
}
