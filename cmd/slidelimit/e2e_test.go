package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// testsMayRun reports whether this test process may run a test, and so need the binary: not when
// it only lists them, fuzzes in a worker, or runs none (-run '^$', as scripts/fuzz does). Each
// fuzzing process built the command, seconds taken out of a timed fuzzing run.
func testsMayRun() bool {
	get := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	return get("test.list") == "" && get("test.fuzzworker") != "true" && get("test.run") != "^$"
}

// binary is the command, built once for every end-to-end test.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if !testsMayRun() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "slidelimit-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "slidelimit")
	build := exec.Command(goTool(), "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the command:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func goTool() string {
	if p := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		return p
	}
	return "go"
}

// failsafe bounds every wait on the child process, so that a hung proxy fails the test instead
// of the run. It is never what a test asserts on.
const failsafe = 30 * time.Second

// proc is one running "slidelimit proxy".
type proc struct {
	cmd     *exec.Cmd
	addr    string // where it listens
	metrics string // where /metrics is, when -metrics-listen was given
	mu      sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
	err     error // cmd.Wait's, after exited is closed
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

var (
	listeningRE = regexp.MustCompile(`listening on (\S+),`)
	metricsRE   = regexp.MustCompile(`metrics on http://(\S+)/metrics`)
)

// startProxy runs the proxy with args on a free loopback port and waits until it listens.
func startProxy(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCommand(t, "proxy", listeningRE, args...)
}

// startCommand runs `slidelimit command -listen 127.0.0.1:0 args...` and waits until its log says
// where it listens (the first submatch of listening); it is killed when the test ends.
func startCommand(t *testing.T, command string, listening *regexp.Regexp, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, append([]string{command, "-listen", "127.0.0.1:0"}, args...)...), exited: make(chan struct{})}
	pipe, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			if m := metricsRE.FindStringSubmatch(line); m != nil {
				p.metrics = m[1]
			}
			if m := listening.FindStringSubmatch(line); m != nil && !signalled {
				p.addr, signalled = m[1], true
				close(ready)
			}
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("%s exited before listening: %v\n%s", command, p.err, p.stderr())
	case <-time.After(failsafe):
		t.Fatalf("%s did not start listening:\n%s", command, p.stderr())
	}
	return p
}

func (p *proc) url(path string) string { return "http://" + p.addr + path }

// exitedOK waits for the process, signalled to stop, to exit, and checks it exited 0.
func (p *proc) exitedOK(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(failsafe):
		t.Fatal("the proxy did not exit after SIGTERM")
	}
	assert.NoError(t, p.err, "exit status")
}

// upstream is a real server behind the proxy that records what reaches it.
type upstream struct {
	*httptest.Server
	hits atomic.Int64
	mu   sync.Mutex
	xff  []string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.xff = append(u.xff, r.Header.Get("X-Forwarded-For"))
		u.mu.Unlock()
		fmt.Fprintf(w, "upstream saw %s", r.URL.RequestURI())
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) forwardedFor() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.xff...)
}

type resp struct {
	status                        int
	body                          string
	policy, rateLimit, retryAfter string
}

func newClient(t *testing.T, keepAlive bool) *http.Client {
	tr := &http.Transport{DisableKeepAlives: !keepAlive}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: failsafe}
}

func do(t *testing.T, c *http.Client, url string, header map[string]string) resp {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h // Go's client sends Request.Host, not a Host in the header map
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return resp{res.StatusCode, string(b), res.Header.Get("RateLimit-Policy"), res.Header.Get("RateLimit"), res.Header.Get("Retry-After")}
}

// ceilSecondsUntil is the whole seconds, rounded up, from ms to endMs.
func ceilSecondsUntil(endMs, ms int64) int64 { return (endMs - ms + 999) / 1000 }

// Exactly limit requests pass in a window; the rest get 429 with the fields the sliding counter
// gives. The window is an hour and aligned to the epoch: if the run straddles an hour boundary
// (a few milliseconds in 3.6 million), it is run again in the next window.
func TestProxyExactLimit(t *testing.T) {
	const limit, window = 5, int64(3_600_000)
	up := newUpstream(t)
	for attempt := 0; ; attempt++ {
		before := time.Now().UnixMilli()
		p := startProxy(t, "-upstream", up.URL, "-limit", strconv.Itoa(limit), "-window", "1h")
		c := newClient(t, true)
		var got []resp
		for i := range limit + 3 {
			got = append(got, do(t, c, p.url("/items?page="+strconv.Itoa(i)), nil))
		}
		after := time.Now().UnixMilli()
		end := before - before%window + window
		if after >= end && attempt == 0 {
			continue
		}
		// t and Retry-After were computed at some instant in [before, after].
		tMin, tMax := ceilSecondsUntil(end, after), ceilSecondsUntil(end, before)
		retryMin, retryMax := ceilSecondsUntil(end+1, after), ceilSecondsUntil(end+1, before)
		for i, r := range got {
			assert.Equal(t, `"default";q=5;w=3600`, r.policy, "request %d", i)
			m := regexp.MustCompile(`^"default";r=(\d+);t=(\d+)$`).FindStringSubmatch(r.rateLimit)
			if !assert.NotNil(t, m, "request %d: RateLimit %q", i, r.rateLimit) {
				continue
			}
			tv, _ := strconv.ParseInt(m[2], 10, 64)
			assert.True(t, tv >= tMin && tv <= tMax, "request %d: t=%d outside [%d, %d]", i, tv, tMin, tMax)
			if i < limit {
				assert.Equal(t, 200, r.status, "request %d", i)
				assert.Equal(t, "upstream saw /items?page="+strconv.Itoa(i), r.body)
				assert.Equal(t, strconv.Itoa(limit-1-i), m[1], "request %d remaining", i)
				assert.Empty(t, r.retryAfter)
				continue
			}
			assert.Equal(t, 429, r.status, "request %d", i)
			assert.Equal(t, "0", m[1], "request %d remaining", i)
			ra, err := strconv.ParseInt(r.retryAfter, 10, 64)
			if assert.NoError(t, err, "request %d: Retry-After %q", i, r.retryAfter) {
				assert.True(t, ra >= max(retryMin, 1) && ra <= retryMax, "request %d: Retry-After %d outside [%d, %d]", i, ra, retryMin, retryMax)
			}
		}
		assert.Equal(t, int64(limit), up.hits.Load(), "refused requests never reach the upstream")
		return
	}
}

// A client that is not a trusted proxy cannot pick its own key with X-Forwarded-For or Forwarded,
// and its forged header is not passed upstream.
func TestProxySpoofedForwardedFor(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "3", "-window", "1h", "-trusted-proxies", "10.0.0.0/8,192.0.2.1")
	c := newClient(t, false)
	var codes []int
	for i := range 6 {
		forged := "198.51.100." + strconv.Itoa(i+1)
		codes = append(codes, do(t, c, p.url("/"), map[string]string{
			"X-Forwarded-For": forged + ", 10.0.0.1",
			"Forwarded":       "for=" + forged,
		}).status)
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429, 429}, codes)
	assert.Equal(t, []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, up.forwardedFor())
}

// Behind a trusted proxy, each client named in X-Forwarded-For has its own limit.
func TestProxyTrustedChain(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "2", "-window", "1h", "-trusted-proxies", "127.0.0.1")
	c := newClient(t, true)
	xff := func(v string) int { return do(t, c, p.url("/"), map[string]string{"X-Forwarded-For": v}).status }
	assert.Equal(t, 200, xff("203.0.113.1"))
	assert.Equal(t, 200, xff("6.6.6.6, 203.0.113.1"))
	assert.Equal(t, 429, xff("7.7.7.7, 203.0.113.1"), "forged hops left of the client change nothing")
	assert.Equal(t, 200, xff("203.0.113.2"))
	assert.Equal(t, 200, xff("2001:db8:1:2::1"))
	assert.Equal(t, 200, xff("2001:db8:1:2::2"))
	assert.Equal(t, 429, xff("2001:db8:1:2::3"), "IPv6 clients are grouped by /64 by default")
	assert.Equal(t, []string{
		"203.0.113.1, 127.0.0.1", "6.6.6.6, 203.0.113.1, 127.0.0.1", "203.0.113.2, 127.0.0.1",
		"2001:db8:1:2::1, 127.0.0.1", "2001:db8:1:2::2, 127.0.0.1",
	}, up.forwardedFor())
}

// The list flags may be repeated, and the lists add up: Go's flag package kept the last one
// only, so a second -trusted-proxies dropped the first's proxies, whose clients then shared one
// key.
func TestProxyListFlagsAddUp(t *testing.T) {
	up := newUpstream(t)
	c := newClient(t, true)
	p := startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-trusted-proxies", "127.0.0.1", "-trusted-proxies", "10.0.0.1")
	xff := func(v string) int { return do(t, c, p.url("/"), map[string]string{"X-Forwarded-For": v}).status }
	assert.Equal(t, []int{200, 200, 429}, []int{xff("203.0.113.1"), xff("203.0.113.2"), xff("203.0.113.2")}, "two clients behind 127.0.0.1")
	p = startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-exempt-paths", "/healthz", "-exempt-paths", "/ready")
	var codes []int
	for _, path := range []string{"/healthz", "/healthz", "/ready", "/ready", "/x", "/x"} {
		codes = append(codes, do(t, c, p.url(path), nil).status)
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes, "both paths exempt")
	p = startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-exempt-cidrs", "127.0.0.1", "-exempt-cidrs", "10.0.0.0/8")
	assert.Equal(t, []int{200, 200}, []int{do(t, c, p.url("/"), nil).status, do(t, c, p.url("/"), nil).status}, "127.0.0.1 exempt")
}

func TestProxyKeyHeader(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-key", "header:X-Api-Key")
	c := newClient(t, true)
	key := func(v string) int {
		h := map[string]string{}
		if v != "" {
			h["X-Api-Key"] = v
		}
		return do(t, c, p.url("/"), h).status
	}
	assert.Equal(t, []int{200, 429, 200, 200, 429}, []int{key("a"), key("a"), key("b"), key(""), key("")})
}

// -key header:Host keys each virtual host apart, although Go's server takes Host out of the
// header map; a header the server always takes out is refused at start.
func TestProxyKeyHost(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-key", "header:Host")
	c := newClient(t, true)
	host := func(h string) int { return do(t, c, p.url("/"), map[string]string{"Host": h}).status }
	assert.Equal(t, []int{200, 429, 200, 200}, []int{host("a.example"), host("a.example"), host("b.example"), host("c.example")})
}

func TestProxyShadowAndMetrics(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "1", "-window", "1h", "-shadow", "-metrics-listen", "127.0.0.1:0")
	c := newClient(t, true)
	for range 3 {
		r := do(t, c, p.url("/"), nil)
		assert.Equal(t, resp{status: 200, body: "upstream saw /"}, r)
	}
	require.NotEmpty(t, p.metrics)
	m := do(t, c, "http://"+p.metrics+"/metrics", nil)
	assert.Equal(t, 200, m.status)
	for _, want := range []string{
		`slidelimit_decisions_total{decision="allowed",reason="ok",rule="default"} 1`,
		`slidelimit_decisions_total{decision="denied",reason="limited",rule="default"} 2`,
		"slidelimit_keys_tracked 1",
		"slidelimit_shadow_mode 1",
		"slidelimit_limiter_errors_total 0",
	} {
		assert.Contains(t, m.body, want+"\n")
	}
	assert.Equal(t, int64(3), up.hits.Load())
	// The public listener has no /metrics of its own: the upstream's is reached.
	assert.Equal(t, "upstream saw /metrics", do(t, c, p.url("/metrics"), nil).body)
}

// -conn-limit closes connections over the limit at accept, and the proxy keeps serving; with a
// bucket policy too, whose 2 per minute is below one per second. A peer in -exempt-cidrs is never
// limited, at accept either; -shadow counts the connections it would close and closes none.
func TestProxyConnLimit(t *testing.T) {
	for _, c := range []struct {
		name       string
		args       []string
		ok, closed int
	}{
		{"sliding-counter", []string{"-policy", "sliding-counter"}, 2, 2},
		{"token-bucket", []string{"-policy", "token-bucket"}, 2, 2},
		{"exempt", []string{"-exempt-cidrs", "10.0.0.0/8,127.0.0.1"}, 4, 0},
		{"not-exempt", []string{"-exempt-cidrs", "10.0.0.0/8"}, 2, 2},
		{"shadow", []string{"-shadow"}, 4, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newUpstream(t)
			p := startProxy(t, append([]string{"-upstream", up.URL, "-limit", "100", "-window", "1h", "-conn-limit", "2", "-metrics-listen", "127.0.0.1:0"}, c.args...)...)
			cl := newClient(t, false)
			var ok int
			for range 4 {
				res, err := cl.Get(p.url("/"))
				if err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode == 200 {
						ok++
					}
				}
			}
			assert.Equal(t, c.ok, ok)
			require.NotEmpty(t, p.metrics)
			m := do(t, cl, "http://"+p.metrics+"/metrics", nil)
			assert.Contains(t, m.body, fmt.Sprintf("slidelimit_connections_refused_total %d\n", c.closed))
		})
	}
}

// heldUpstream is an upstream that holds its one request until release is closed, then answers
// "finished"; entered is closed when the request arrives.
func heldUpstream(t *testing.T) (up *httptest.Server, entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "finished")
	}))
	t.Cleanup(up.Close)
	return up, entered, release
}

// SIGTERM lets a request in flight finish, refuses new connections, and exits 0.
func TestProxyGracefulShutdown(t *testing.T) {
	up, entered, release := heldUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-limit", "10", "-window", "1h")
	c := newClient(t, true)

	type result struct {
		r   resp
		err error
	}
	inflight := make(chan result, 1)
	go func() {
		res, err := c.Get(p.url("/slow"))
		if err != nil {
			inflight <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		inflight <- result{resp{status: res.StatusCode, body: string(b)}, err}
	}()
	select {
	case <-entered:
	case <-time.After(failsafe):
		t.Fatal("the request never reached the upstream")
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))

	// New connections are refused once the listener is closed.
	deadline := time.Now().Add(failsafe)
	for {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			break
		}
		conn.Close()
		require.True(t, time.Now().Before(deadline), "the proxy kept accepting connections after SIGTERM")
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-p.exited:
		t.Fatal("the proxy exited with a request in flight")
	default:
	}

	close(release)
	r := <-inflight
	require.NoError(t, r.err)
	assert.Equal(t, resp{status: 200, body: "finished"}, resp{status: r.r.status, body: r.r.body})
	p.exitedOK(t)
	assert.Contains(t, p.stderr(), "shutting down")
	assert.Contains(t, p.stderr(), "stopped")
}

// hangingUpstream is an upstream that holds every request until the test ends.
type hangingUpstream struct {
	*httptest.Server
	entered chan struct{} // closed when the first request arrives
}

func newHangingUpstream(t *testing.T) *hangingUpstream {
	up := &hangingUpstream{entered: make(chan struct{})}
	release := make(chan struct{})
	var once sync.Once
	up.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(up.entered) })
		<-release
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handlers
	return up
}

// inFlight sends a request through p to up and returns once up holds it; the channel then
// receives the request's outcome.
func (up *hangingUpstream) inFlight(t *testing.T, p *proc) <-chan error {
	t.Helper()
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
	case <-up.entered:
	case <-time.After(failsafe):
		t.Fatal("the request never reached the upstream")
	}
	return failed
}

// SIGTERM with a request still running after -shutdown-timeout: the proxy cuts it off, says so,
// and exits 0, as asked.
func TestProxyShutdownCutsOffLateRequests(t *testing.T) {
	up := newHangingUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-shutdown-timeout", "100ms", "-metrics-listen", "127.0.0.1:0")
	failed := up.inFlight(t, p)
	terminateCuttingOff(t, p, "100ms")
	assert.Contains(t, p.stderr(), "msg=stopped")
	assert.Error(t, <-failed, "the request in flight was cut off")
}

// A second SIGTERM is heard while a long reload (a large -config) is still running: the proxy does
// not wait for the reload before it drains, so the second signal cuts off what is in flight at
// once rather than after -shutdown-timeout, and the reload logs nothing after "stopped".
func TestProxySecondSignalDuringAReload(t *testing.T) {
	up := newHangingUpstream(t)
	cfg := writeRules(t, 20_000, "  - {name: r%[1]d, paths: [/r%[1]d], rates: [1/1h]}\n")
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0", "-shutdown-timeout", "1h")
	failed := up.inFlight(t, p)
	reloads := strings.Count(p.stderr(), "config reloaded")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP)) // a reload of 20,000 rules, about 0.3s
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "shutting down") })
	assert.Equal(t, reloads, strings.Count(p.stderr(), "config reloaded"), "the drain began only once the reload had ended")
	terminateCuttingOff(t, p, "")
	assert.Contains(t, p.stderr(), "a second stop signal")
	log := p.stderr()
	assert.NotContains(t, log[strings.Index(log, "msg=stopped"):], "config reload", "a reload logged after stopped")
	assert.LessOrEqual(t, strings.Count(log, "config reloaded"), reloads+1)
	assert.Error(t, <-failed, "the request in flight was cut off")
}

// A second SIGTERM while the proxy waits out -shutdown-timeout cuts off what is in flight at once,
// and the proxy still exits 0: before, the first had given the signal back its default action,
// and the second killed the process.
func TestProxySecondSignalCutsOff(t *testing.T) {
	up := newHangingUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-shutdown-timeout", "1h")
	failed := up.inFlight(t, p)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "shutting down") })
	terminateCuttingOff(t, p, "")
	assert.Contains(t, p.stderr(), "a second stop signal")
	assert.NotContains(t, p.stderr(), "after -shutdown-timeout", "the timeout was never reached")
	assert.Error(t, <-failed, "the request in flight was cut off")
}

// newUpgradeUpstream answers "Upgrade: echo" with 101 and then echoes each line back until the
// connection closes, as a WebSocket server holds its connection.
func newUpgradeUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString(line)
			brw.Flush()
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// upgraded is a connection switched to the echo protocol through the proxy.
type upgraded struct {
	conn net.Conn
	br   *bufio.Reader
}

func dialUpgraded(t *testing.T, p *proc) *upgraded {
	t.Helper()
	conn, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	return upgradeOn(t, p, conn)
}

// upgradeOn asks for the echo protocol on conn, a new connection to p.
func upgradeOn(t *testing.T, p *proc, conn net.Conn) *upgraded {
	t.Helper()
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(failsafe)))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", p.addr)
	u := &upgraded{conn: conn, br: bufio.NewReader(conn)}
	res, err := http.ReadResponse(u.br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, res.StatusCode)
	return u
}

func (u *upgraded) echo(msg string) (string, error) {
	if _, err := io.WriteString(u.conn, msg+"\n"); err != nil {
		return "", err
	}
	line, err := u.br.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// SIGTERM gives an upgraded connection (a WebSocket), which http.Server.Shutdown does not track,
// the same -shutdown-timeout as a request: it keeps working until it closes, and the proxy then
// exits 0 without a warning; one still open at the deadline is cut off, with the warning.
func TestProxyShutdownWaitsForUpgradedConnections(t *testing.T) {
	up := newUpgradeUpstream(t)
	t.Run("closed in time", func(t *testing.T) {
		p := startProxy(t, "-upstream", up.URL, "-shutdown-timeout", "1h")
		ws := dialUpgraded(t, p)
		got, err := ws.echo("before")
		require.NoError(t, err)
		require.Equal(t, "before", got)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		waitFor(t, func() bool {
			select {
			case <-p.exited:
				return true
			default:
				return strings.Contains(p.stderr(), "waiting for upgraded connections")
			}
		})
		require.Contains(t, p.stderr(), `msg="waiting for upgraded connections (WebSockets) to close" open=1`)
		got, err = ws.echo("after SIGTERM")
		require.NoError(t, err, "the upgraded connection works on after SIGTERM")
		assert.Equal(t, "after SIGTERM", got)
		select {
		case <-p.exited:
			t.Fatal("the proxy exited with an upgraded connection open")
		default:
		}
		ws.conn.Close()
		select {
		case <-p.exited:
		case <-time.After(failsafe):
			t.Fatalf("the proxy did not exit once the upgraded connection closed:\n%s", p.stderr())
		}
		assert.NoError(t, p.err, "exit status:\n%s", p.stderr())
		assert.Contains(t, p.stderr(), "msg=stopped")
		assert.NotContains(t, p.stderr(), "cut off")
	})
	t.Run("cut off at the deadline", func(t *testing.T) {
		// Several times: the connection's access-log line, written as it closes, raced with the
		// exit, and was lost in one run of five or so.
		for range 5 {
			p := startProxy(t, "-upstream", up.URL, "-shutdown-timeout", "100ms", "-log-admitted", "1")
			ws := dialUpgraded(t, p)
			_, err := ws.echo("before")
			require.NoError(t, err)
			terminateCuttingOff(t, p, "100ms")
			_, err = ws.br.ReadString('\n')
			assert.Error(t, err, "the upgraded connection was closed")
			assert.Regexp(t, `status=101 .*path=/ws `, p.stderr(), "the cut-off connection's line is written before the exit")
		}
	})
}

// Bytes a client sends in the same write as its Upgrade request, before the 101, reach the
// upstream: the server reads them into its buffer with the request, and the reverse proxy alone
// copied from the bare connection, losing them.
func TestProxyUpgradeKeepsPipelinedBytes(t *testing.T) {
	up := newUpgradeUpstream(t)
	p := startProxy(t, "-upstream", up.URL)
	conn, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nsent early\n", p.addr)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, res.StatusCode)
	assert.NotEmpty(t, res.Header.Get("RateLimit"), "the upgrade was decided by the limiter")
	line, err := br.ReadString('\n')
	require.NoError(t, err, "the line sent with the request never came back")
	assert.Equal(t, "sent early\n", line)
	_, err = io.WriteString(conn, "sent after\n")
	require.NoError(t, err)
	line, err = br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "sent after\n", line)
}

// A SIGTERM while the limiters of a large -config are still being built stops the proxy (exit 0),
// as one after it listens does, rather than killing it with the signal's default action.
func TestProxySIGTERMWhileStarting(t *testing.T) {
	file := writeRules(t, 4000, "  - {name: r%[1]d, paths: [/p%[1]d/], rates: [10/1s, 1000/1h]}\n")
	cmd := exec.Command(binary, "proxy", "-listen", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-config", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	time.Sleep(300 * time.Millisecond) // past the runtime's start, and (on 2 cores) well before listening
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status:\n%s", stderr.String())
	case <-time.After(failsafe):
		cmd.Process.Kill()
		t.Fatalf("the proxy did not stop:\n%s", stderr.String())
	}
	assert.Regexp(t, `msg="?stopped`, stderr.String())
}

// Bad flags: a message naming the flag and the value, and exit status 2 (1 for a port that
// cannot be listened on).
func TestProxyBadFlags(t *testing.T) {
	up := "http://127.0.0.1:1"
	// An address that parses but is in use: a failure while running, not a bad command line.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	busy := held.Addr().String()
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{}, "-upstream is required", 2},
		{[]string{"-upstream", "ftp://example.com"}, `-upstream "ftp://example.com": must be an http:// or https:// URL`, 2},
		{[]string{"-upstream", "http://[::1"}, `-upstream "http://[::1"`, 2},
		{[]string{"-upstream", "http://"}, `-upstream "http://": must be an http:// or https:// URL with a host`, 2},
		{[]string{"-upstream", up, "-limit", "0x10"}, `-limit 0x10: not a whole number in decimal digits`, 2},
		{[]string{"-upstream", up, "-limit", "0"}, "-limit 0: must be in [1, 4294967295]", 2},
		{[]string{"-upstream", up, "-limit", "ten"}, `-limit ten: not a whole number`, 2},
		{[]string{"-upstream", up, "-window", "0s"}, "-window 0s: must be a whole number of milliseconds", 2},
		{[]string{"-upstream", up, "-window", "1.5ms"}, "-window 1.5ms", 2},
		{[]string{"-upstream", up, "-window", "60"}, "-window 60: 60 has no unit: add a unit, like 60s", 2},
		{[]string{"-upstream", up, "-window", "1 minute"}, `-window 1 minute: "1 minute" is not a duration: write a number and a unit`, 2},
		{[]string{"-upstream", up, "-policy", "nope"}, `-policy "nope": unknown policy`, 2},
		{[]string{"-upstream", up, "-policy", "token-bucket", "-rate", "1/1h", "-rate", "4000000000/1d"}, "-policy token-bucket -rate 4000000000/1d: it needs a burst of 4000000000×27 units, above 4294967295 (a bucket counts in units 27 times smaller, so that it refills a whole number a second): lower the limit, give a limit that is a multiple of the window's seconds, or use a window policy such as sliding-counter", 2},
		{[]string{"-upstream", up, "-rate", "10"}, `-rate 10: "10": write LIMIT/WINDOW, like 10/1s, 1000/1h or 10r/m`, 2},
		{[]string{"-upstream", up, "-rate", "10/60"}, `-rate 10/60: "10/60": the window 60 has no unit: add a unit, like 60s`, 2},
		{[]string{"-upstream", up, "-rate", "0/1s"}, `the limit must be in [1, 4294967295]`, 2},
		{[]string{"-upstream", up, "-rate", "99999999999999999999/1s"}, `-rate 99999999999999999999/1s: "99999999999999999999/1s": the limit must be in [1, 4294967295]`, 2},
		{[]string{"-upstream", up, "-rate", "10/1s", "-rate", "20/1s"}, "two limits with the window 1s", 2},
		{[]string{"-upstream", up, "-rate", "10/1s", "-limit", "5"}, "give either -rate or -limit and -window, not both", 2},
		{[]string{"-upstream", up, "-shadow=maybe"}, "-shadow maybe: want true or false", 2},
		{[]string{"-upstream", up, "-redis-mode", "batched"}, "-redis-mode batched: needs -redis URL", 2},
		{[]string{"-upstream", up, "-redis-mode", "fast"}, `-redis-mode "fast": must be exact`, 2},
		// Refused before Redis is dialled (port 1 answers nothing, which took a second).
		{[]string{"-upstream", up, "-redis", "redis://127.0.0.1:1", "-redis-mode", "batched", "-policy", "gcra"}, "-redis-mode batched with -policy gcra: batched mode decides the sliding-counter policy only", 2},
		{[]string{"-upstream", up, "-on-redis-error", "maybe"}, `-on-redis-error "maybe": must be open, closed or local`, 2},
		{[]string{"-upstream", up, "-redis-timeout", "0s"}, "-redis-timeout 0s: must be in [1ms, 1m]", 2},
		{[]string{"-upstream", up, "-redis-deny-max-age", "500us"}, "-redis-deny-max-age 500us: must be 0 (until the retry time) or at least 1ms", 2},
		{[]string{"-upstream", up, "-redis-deny-max-age", "-1s"}, "-redis-deny-max-age -1s: must be 0 (until the retry time) or at least 1ms", 2},
		{[]string{"-upstream", up, "-redis", "redis://127.0.0.1:1", "-redis-mode", "batched", "-redis-deny-max-age", "1s"}, "-redis-deny-max-age 1s: bounds the deny cache of -redis-mode exact; batched mode decides in process and keeps none", 2},
		{[]string{"-upstream", up, "-fleet-size", "0"}, "-fleet-size 0: must be in [1, 1048576]", 2},
		// Flags only Redis reads, set without -redis: at their default value too, since setting
		// one says Redis was expected.
		{[]string{"-upstream", up, "-fleet-size", "3"}, "-fleet-size 3: needs -redis URL", 2},
		{[]string{"-upstream", up, "-fleet-size", "1"}, "-fleet-size 1: needs -redis URL", 2},
		{[]string{"-upstream", up, "-on-redis-error", "closed"}, "-on-redis-error closed: needs -redis URL", 2},
		{[]string{"-upstream", up, "-on-redis-error", "local"}, "-on-redis-error local: needs -redis URL", 2},
		{[]string{"-upstream", up, "-redis-timeout", "20ms"}, "-redis-timeout 20ms: needs -redis URL", 2},
		{[]string{"-upstream", up, "-redis-deny-max-age", "1s"}, "-redis-deny-max-age 1s: needs -redis URL", 2},
		{[]string{"-upstream", up, "-redis-mode", "exact"}, "-redis-mode exact: needs -redis URL", 2},
		{[]string{"-upstream", up, "-listen", "1.2.3:1"}, `-listen "1.2.3:1": "1.2.3" is not an IP address`, 2},
		{[]string{"-upstream", up, "-max-keys", "-1"}, "-max-keys -1", 2},
		{[]string{"-upstream", up, "-expected-keys", "-1"}, "-expected-keys -1: must be 0 (tables that grow) or more", 2},
		{[]string{"-upstream", up, "-expected-keys", "100000000"}, "-expected-keys 100000000: above the default key cap, 67108864 (raise -max-keys)", 2},
		{[]string{"-upstream", up, "-max-keys", "1000", "-expected-keys", "1001"}, "-expected-keys 1001: above -max-keys 1000", 2},
		{[]string{"-upstream", up, "-redis", "redis://127.0.0.1:1", "-expected-keys", "10"}, "-expected-keys 10: sizes in-process limits, and with -redis there are none", 2},
		{[]string{"-upstream", up, "-max-delay", "2m"}, "-max-delay 2m: must be in [0, 1m]", 2},
		{[]string{"-upstream", up, "-max-waiting", "-3"}, "-max-waiting -3: must be 0 (the default, 1024) or more", 2},
		{[]string{"-upstream", up, "-max-waiting", "5"}, "-max-waiting 5: needs -max-delay", 2},
		{[]string{"-upstream", up, "-max-waiting", "0", "-max-delay", "0s"}, "-max-waiting 0: needs -max-delay", 2},
		{[]string{"-upstream", up, "-config-poll", "5s"}, "-config-poll 5s: needs -config FILE", 2},
		{[]string{"-upstream", up, "-log-format", "xml"}, `-log-format "xml": must be text or json`, 2},
		{[]string{"-upstream", up, "-exempt-paths", "healthz"}, `-exempt-paths "healthz": "healthz" must start with /`, 2},
		{[]string{"-upstream", up, "-exempt-paths", "/ok,/x/../y"}, `-exempt-paths "/ok,/x/../y": "/x/../y" is matched against clean paths, so write it as "/y"`, 2},
		{[]string{"-upstream", up, "-exempt-cidrs", "10.0.0.0/33"}, `-exempt-cidrs "10.0.0.0/33"`, 2},
		{[]string{"-upstream", up, "-config", "/nonexistent/rules.yaml"}, "-config stat /nonexistent/rules.yaml: no such file or directory", 2},
		{[]string{"-upstream", up, "-redis", "redis://:s3cret@[::1"}, `-redis: redisstore: Redis URL "redis://:xxxxx@[::1" is malformed`, 2},
		{[]string{"-upstream", up, "-key", "cookie"}, `-key "cookie": must be ip, header:NAME, conn or path`, 2},
		{[]string{"-upstream", up, "-key", "header:"}, `-key "header:"`, 2},
		{[]string{"-upstream", up, "-key", "header:X(Y)"}, `-key "header:X(Y)": header name "X(Y)" has '(', which a header name cannot hold`, 2},
		{[]string{"-upstream", up, "-key", "header:X-Api-Key,X-Other"}, `has ','`, 2},
		{[]string{"-upstream", up, "-redis", "redis://127.0.0.1:1", "-redis-mode", "batched", "-max-keys", "5"}, "-max-keys 5: caps in-process limiters, and -redis-mode batched has no key cap", 2},
		{[]string{"-upstream", up, "-key", "header:transfer-encoding"}, `-key "header:transfer-encoding": the header transfer-encoding never reaches the limiter`, 2},
		{[]string{"-upstream", up, "-key", "header:Ключ"}, `has 'К'`, 2},
		{[]string{"-upstream", up, "-key", "header:X Y"}, `has ' '`, 2},
		{[]string{"-upstream", up, "-trusted-proxies", "10.0.0.0/33"}, `-trusted-proxies "10.0.0.0/33"`, 2},
		{[]string{"-upstream", up, "-trusted-proxies", "10.0.0.1,::ffff:0:0/95"}, `-trusted-proxies "10.0.0.1,::ffff:0:0/95": httplimit: "::ffff:0:0/95": an IPv4-mapped IPv6 range must be /96 or longer`, 2},
		{[]string{"-upstream", up, "-exempt-cidrs", "::ffff:10.0.0.0/88"}, `-exempt-cidrs "::ffff:10.0.0.0/88": httplimit: "::ffff:10.0.0.0/88": an IPv4-mapped IPv6 range must be /96 or longer`, 2},
		{[]string{"-upstream", up, "-forwarded-header", "x-real-ip"}, `-forwarded-header "x-real-ip"`, 2},
		{[]string{"-upstream", up, "-conn-limit", "-1"}, "-conn-limit -1", 2},
		{[]string{"-upstream", up, "-ipv6-prefix", "129"}, "-ipv6-prefix 129", 2},
		{[]string{"-upstream", up, "-name", "a b"}, `-name "a b"`, 2},
		{[]string{"-upstream", up, "-redis", "mysql://x"}, `unknown scheme "mysql": want redis://, rediss://, unix:// or redis-sentinel://`, 2},
		{[]string{"-upstream", up, "extra"}, `unexpected argument "extra"`, 2},
		{[]string{"-upstream", up, "-listen", "nowhere"}, `-listen "nowhere": missing port in address: write host:port`, 2},
		{[]string{"-upstream", up, "-listen", "256.0.0.1:1"}, `-listen "256.0.0.1:1": "256.0.0.1" is not an IP address`, 2},
		{[]string{"-upstream", up, "-listen", "127.0.0.1:"}, `-listen "127.0.0.1:": no port: write host:port`, 2},
		{[]string{"-upstream", up, "-listen", ":"}, `-listen ":": no port`, 2},
		{[]string{"-upstream", up, "-metrics-listen", "127.0.0.1:"}, `-metrics-listen "127.0.0.1:": no port`, 2},
		{[]string{"-upstream", up, "-listen", "127.0.0.1:65536"}, `-listen "127.0.0.1:65536": port 65536 is out of range [0, 65535]`, 2},
		{[]string{"-upstream", up, "-metrics-listen", "bogus"}, `-metrics-listen "bogus": missing port in address`, 2},
		{[]string{"-upstream", up, "-listen", ""}, "-listen: empty; give host:port (port 0 picks a free one)", 2},
		{[]string{"-upstream", up, "-listen", busy}, `-listen "` + busy + `": listen tcp ` + busy, 1},
		{[]string{"-upstream", "127.0.0.1:9000"}, `-upstream "127.0.0.1:9000": no scheme: write a URL, like http://127.0.0.1:9000`, 2},
		{[]string{"-upstream", "http://127.0.0.1:99999/"}, `-upstream "http://127.0.0.1:99999/": port 99999 is out of range [1, 65535]`, 2},
		{[]string{"-upstream", "http://127.0.0.1:0"}, `-upstream "http://127.0.0.1:0": port 0 is out of range [1, 65535]`, 2},
		{[]string{"-upstream", "http://127.0.0.1:"}, `-upstream "http://127.0.0.1:": the port after ':' is empty`, 2},
		{[]string{"-upstream", "https://[::1]:/api"}, `-upstream "https://[::1]:/api": the port after ':' is empty`, 2},
		{[]string{"-upstream", "http://[::1]:65536/api"}, `-upstream "http://[::1]:65536/api": port 65536 is out of range [1, 65535]`, 2},
		{[]string{"-upstream", "http://127.0.0.1:9000/app#top"}, `-upstream "http://127.0.0.1:9000/app#top": has a #fragment, which is never sent to the upstream: remove it`, 2},
		{[]string{"-upstream", "http://127.0.0.1:9000/#"}, `has a #fragment`, 2},
		{[]string{"-upstream", up, "-window", "60d"}, "-window 60d: must be a whole number of milliseconds in [1ms, ", 2},
		{[]string{"-upstream", up, "-config-poll", "5"}, "-config-poll 5: 5 has no unit: add a unit, like 5s", 2},
		{[]string{"-upstream", up, "-max-delay", "-0.5"}, "-max-delay -0.5: -0.5 has no unit", 2},
	} {
		// Port 0: an argument list that is wrongly accepted starts a proxy, which the failsafe
		// then stops, instead of holding a fixed port.
		cmd := exec.Command(binary, append([]string{"proxy", "-listen", "127.0.0.1:0"}, tc.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.WaitDelay = time.Second
		ctxTimer := time.AfterFunc(failsafe, func() { cmd.Process.Kill() })
		err := cmd.Run()
		ctxTimer.Stop()
		var exit *exec.ExitError
		if assert.True(t, errors.As(err, &exit), "%v: %v", tc.args, err) {
			assert.Equal(t, tc.code, exit.ExitCode(), "%v", tc.args)
		}
		assert.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		assert.NotContains(t, stderr.String(), "s3cret", "%v: the password is never printed", tc.args)
		assert.Less(t, strings.Count(stderr.String(), "\n"), 4, "%v: one line and a hint, not a usage dump", tc.args)
	}
}

// -expected-keys tables the process cannot hold are the flag's fault, named with its value and
// what to do about it; the policy and the rule being built when memory ran out are not. The Go
// memory limit is the one a test can set whatever the machine.
func TestProxyExpectedKeysBeyondTheMemoryLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "proxy", "-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0", "-expected-keys", "10000000")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=64MiB")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, exitUsage, ee.ExitCode(), "%s", out)
	assert.Regexp(t, `(?m)^slidelimit proxy: -expected-keys 10000000: rule default, 100/1m: engine: WithExpectedKeys\(10000000\) needs \d+ MiB of tables at New, more than the Go memory limit, 64 MiB \(GOMEMLIMIT\); lower -expected-keys .*, or raise that limit$`, string(out))
	assert.NotContains(t, string(out), "-policy", "blamed on the policy")
}

// Under ulimit -v, tables that fit in the limit but not beside what the process has mapped
// already (a Go program maps about a gigabyte before main) are refused as the memory limit's
// are, not let through for the runtime to end the process with "fatal error: out of memory".
// 60M keys take 1.1 GiB of tables; a limit of 2,000,000 KiB leaves well under that.
func TestProxyExpectedKeysBeyondTheAddressSpace(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the address-space check reads Linux's /proc")
	}
	if strconv.IntSize == 32 {
		// A 32-bit process reserves far less up front, and its tables for these keys fit in
		// 2 GB; engine's TestExpectedKeysOn32Bits checks the 32-bit bound.
		t.Skip("the figures here are a 64-bit process's")
	}
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -v 2000000 && exec "$0" "$@"`, binary,
		"proxy", "-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0", "-expected-keys", "60000000")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, exitUsage, ee.ExitCode(), "%s", out)
	assert.NotContains(t, string(out), "fatal error")
	assert.Regexp(t, `(?m)^slidelimit proxy: -expected-keys 60000000: rule default, 100/1m: engine: WithExpectedKeys\(60000000\) needs 1\.1 GiB of tables at New, more than this process's address space has left, \d+ MiB of 1\.9 GiB \(ulimit -v\); lower -expected-keys .*, or raise that limit$`, string(out))
}

func TestBenchCommand(t *testing.T) {
	cmd := exec.Command(binary, "bench", "-keys", "1000", "-duration", "100ms", "-workers", "2")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	out := stdout.String()
	for _, row := range []string{"decisions/s", "ns per decision", "accept rate", "keys tracked", "bytes per key"} {
		assert.Regexp(t, `(?m)^  `+row+` +[0-9][0-9,.]*( %)?( |$)`, out)
	}
	assert.Regexp(t, `(?m)^  keys tracked +1,000$`, out, "every key was warmed and is still live")
	assert.NotContains(t, stderr.String(), "\r", "no progress bar when stderr is not a terminal")
	assert.Contains(t, stderr.String(), "measuring for 100ms")
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

// terminateCuttingOff sends p SIGTERM and checks that it exits 0, warning that what was still in
// flight after -shutdown-timeout (timeout, as the flag was given; "" for a second signal) was cut
// off, with no ERROR line: a request cut off at shutdown is not an error of the proxy's.
func terminateCuttingOff(t *testing.T, p *proc, timeout string) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(failsafe):
		t.Fatalf("the proxy did not exit after SIGTERM:\n%s", p.stderr())
	}
	assert.NoError(t, p.err, "exit status:\n%s", p.stderr())
	want := `level=WARN msg="requests still in flight after -shutdown-timeout ` + timeout + ` were cut off"`
	if timeout == "" {
		want = `level=WARN msg="requests still in flight at the second stop signal were cut off"`
	}
	assert.Contains(t, p.stderr(), want)
	assert.NotContains(t, p.stderr(), "level=ERROR")
}

// With limits that cannot give units back (the sliding log), a limit that was not asked is still
// listed in RateLimit, and lengthens Retry-After when it is used up for longer: a client that
// waited only for the refusing limit would be refused again.
func TestProxySlidingLogListsLimitsNotAsked(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-policy", "sliding-log", "-rate", "2/1s", "-rate", "2/1h")
	c := newClient(t, true)
	assert.Equal(t, []int{200, 200}, []int{do(t, c, p.url("/"), nil).status, do(t, c, p.url("/"), nil).status})
	r := do(t, c, p.url("/"), nil)
	assert.Equal(t, 429, r.status)
	assert.Regexp(t, `^"default-1s";r=0;t=1, "default-1h";r=0;t=(359[0-9]|3600)$`, r.rateLimit)
	assert.Regexp(t, `^(359[0-9]|3600)$`, r.retryAfter, "the longest wait: the hour's")
}

// An -upstream with user information is refused at start, exit 2, in one line naming the flag:
// the reverse proxy never sends a URL's credentials, so the upstream would never see them, and
// the log would print the password. No -upstream error prints a password.
func TestProxyRefusesUpstreamUserinfo(t *testing.T) {
	for _, tc := range []struct{ upstream, want string }{
		{"http://alice:s3cr3t-pw@127.0.0.1:1/", `-upstream "http://alice:xxxxx@127.0.0.1:1/": has a user part, and credentials in the URL are not sent to the upstream: remove it, and have the upstream trust the proxy another way`},
		{"https://alice@127.0.0.1:1/", `-upstream "https://alice@127.0.0.1:1/": has a user part`},
		{"ftp://a:pw@h/", `-upstream "ftp://a:xxxxx@h/": must be an http:// or https:// URL with a host`},
		{"http://:19000", `-upstream "http://:19000": must be an http:// or https:// URL with a host`},
		{"http://a:s3cr3t-pw@[::1", `-upstream "http://a:xxxxx@[::1": parse "http://a:xxxxx@[::1": missing ']' in host`},
		{"a:s3cr3t-pw@127.0.0.1:9000", `-upstream "a:xxxxx@127.0.0.1:9000": no scheme`},
		{"http://127.0.0.1:99999/?password=s3cr3t-pw", `-upstream "http://127.0.0.1:99999/?password=xxxxx": port 99999 is out of range [1, 65535]`},
		{"ftp://h/?password=s3cr3t-pw", `-upstream "ftp://h/?password=xxxxx": must be an http:// or https:// URL with a host`},
	} {
		out, code := runProxy(t, "-listen", "127.0.0.1:0", "-upstream", tc.upstream)
		assert.Equal(t, exitUsage, code, out)
		assert.Contains(t, out, "slidelimit proxy: "+tc.want, tc.upstream)
		assert.NotContains(t, out, "s3cr3t-pw", "%s: the password is never printed", tc.upstream)
		assert.NotContains(t, out, ":pw@", "%s: the password is never printed", tc.upstream)
		assert.Less(t, strings.Count(out, "\n"), 4, "%s: one line and a hint", tc.upstream)
	}
}

// The start-up line names -upstream with a password= option hidden, as its errors do: an upstream
// API token in the query went into every log collector.
func TestProxyStartLineHidesAnUpstreamPassword(t *testing.T) {
	p := startProxy(t, "-upstream", "http://127.0.0.1:1/base?password=s3cr3t-pw&k=v")
	assert.Contains(t, p.stderr(), "forwarding to http://127.0.0.1:1/base?password=xxxxx&k=v;")
	assert.NotContains(t, p.stderr(), "s3cr3t-pw")
}

// waitResult is how a request that waited under -max-delay was answered.
type waitResult struct {
	status     int
	retryAfter string
	err        error
}

// waitUnderMaxDelay sends, through c, a request that p (with -max-delay and -max-waiting 1, its
// limit used up) makes wait for its turn, and returns once it waits: when a further request is
// refused at once for it. The limit must be one whose wait does not depend on the clock's place in
// a window: a GCRA of 1 a minute waits a minute, where a sliding window's unit used just before
// the window's edge comes back, all but a fraction, a moment after it. The channel gets the waiting request's answer.
func waitUnderMaxDelay(t *testing.T, p *proc, c *http.Client) <-chan waitResult {
	t.Helper()
	waited := make(chan waitResult, 1)
	go func() {
		res, err := c.Get(p.url("/"))
		if err != nil {
			waited <- waitResult{err: err}
			return
		}
		res.Body.Close()
		waited <- waitResult{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After")}
	}()
	// A further request sent before that one waits would wait in its place, until its client
	// gives up, and that one would be refused.
	time.Sleep(300 * time.Millisecond) // long enough for a loaded machine to have the request waiting
	deadline := time.Now().Add(failsafe)
	for {
		select {
		case res := <-waited:
			t.Fatalf("the request that should wait was answered: %+v", res)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", p.url("/"), nil)
		res, err := newClient(t, true).Do(req)
		cancel()
		if err == nil {
			res.Body.Close()
			require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "a request while another waits, with -max-waiting 1")
			return waited
		}
		require.True(t, time.Now().Before(deadline), "the request never waited")
	}
}

// SIGTERM refuses a request waiting under -max-delay at once, 429 with Retry-After: it held its
// connection until -shutdown-timeout cut it, and the access log said 429 all the same.
func TestProxyShutdownRefusesWaitingRequests(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	p := startProxy(t, "-upstream", up.URL, "-rate", "1/1m", "-policy", "gcra", "-max-delay", "1m", "-max-waiting", "1", "-shutdown-timeout", "1h")
	c := newClient(t, true)
	first, err := c.Get(p.url("/"))
	require.NoError(t, err)
	first.Body.Close()
	require.Equal(t, 200, first.StatusCode)

	waited := waitUnderMaxDelay(t, p, c)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case res := <-waited:
		require.NoError(t, res.err)
		assert.Equal(t, http.StatusTooManyRequests, res.status)
		assert.NotEmpty(t, res.retryAfter)
	case <-time.After(failsafe):
		t.Fatal("the request waiting under -max-delay was not answered after SIGTERM")
	}
	p.exitedOK(t)
	assert.NotContains(t, p.stderr(), "cut off")
}

// -max-waiting bounds a rule's waiting requests across a reload: one still waiting under the rule
// the reload replaced counts against the new rule's bound, so with -max-waiting 1 a request to the
// reloaded rule is refused at once instead of waiting beside it.
func TestProxyMaxWaitingAcrossReloads(t *testing.T) {
	up := newUpstream(t)
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, cfg, "rules:\n  - name: api\n    rates: [1/1m]\n    policy: gcra\n")
	p := startProxy(t, "-upstream", up.URL, "-config", cfg, "-config-poll", "0", "-max-delay", "1m", "-max-waiting", "1", "-shutdown-timeout", "1h")
	c := newClient(t, true)
	require.Equal(t, 200, do(t, c, p.url("/"), nil).status)
	waited := waitUnderMaxDelay(t, p, c)
	writeFile(t, cfg, "exempt:\n  paths: [/healthz]\nrules:\n  - name: api\n    rates: [1/1m]\n    policy: gcra\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "config reloaded") })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url("/"), nil)
	res, err := newClient(t, true).Do(req)
	require.NoError(t, err, "a request to the reloaded rule waited beside the one still waiting under the old rule")
	res.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "a request to the reloaded rule while one waits under the old")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case res := <-waited:
		require.NoError(t, res.err)
		assert.Equal(t, http.StatusTooManyRequests, res.status, "the waiting request is refused at shutdown")
	case <-time.After(failsafe):
		t.Fatal("the waiting request was not answered after SIGTERM")
	}
}

// A client that hangs up before a slow upstream answers is logged with status 499, not 502:
// an operator must be able to tell client aborts from upstream failures.
func TestProxyLogsAClientAbortAs499(t *testing.T) {
	up := newHangingUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-log-admitted", "1")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url("/slow"), nil)
	done := make(chan error, 1)
	go func() {
		res, err := newClient(t, true).Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	select {
	case <-up.entered:
	case <-time.After(failsafe):
		t.Fatal("the request never reached the upstream")
	}
	cancel()
	require.Error(t, <-done)
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "msg=request") })
	assert.Contains(t, p.stderr(), "status=499")
	assert.NotContains(t, p.stderr(), "status=502")
}

// A client that goes away partway through its request body is logged 499, at INFO, not 502 with
// an ERROR line: the transport reports it as its own failure to write to the upstream, which read
// as an upstream failure (most of such requests, and every chunked one, said 502), so that any
// client could write ERROR lines at will.
func TestProxyLogsAClientGoneMidBodyAs499(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "-upstream", up.URL, "-rate", "1000/1m", "-log-admitted", "1")
	const rounds = 5
	bodies := []string{
		"Content-Length: 100000\r\n\r\n" + strings.Repeat("x", 100),
		"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
	}
	for range rounds {
		for _, body := range bodies {
			c, err := net.Dial("tcp", p.addr)
			require.NoError(t, err)
			_, err = io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\n"+body)
			require.NoError(t, err)
			// Long enough for the body's start to reach the upstream before the client leaves.
			time.Sleep(100 * time.Millisecond)
			require.NoError(t, c.Close())
		}
	}
	want := rounds * len(bodies)
	waitFor(t, func() bool { return strings.Count(p.stderr(), "msg=request") == want })
	log := p.stderr()
	assert.Equal(t, want, strings.Count(log, "status=499"), log)
	assert.NotContains(t, log, "status=502")
	assert.NotContains(t, log, "level=ERROR")
}

// A client that sends a malformed chunked body and waits for the answer gets a 400, logged as 400
// at most at DEBUG: the fault is its own, and it is still there to read one. It got 499, as if it
// had gone, once a failed read of the body meant a client gone.
func TestProxyAnswersAMalformedBodyWith400(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "-upstream", up.URL, "-rate", "1000/1m", "-log-admitted", "1")
	bodies := map[string]string{
		"bad-length":  "zz\r\naaaa\r\n",
		"long-line":   "1;" + strings.Repeat("a", 5000) + "\r\nx\r\n0\r\n\r\n",
		"bad-trailer": "1\r\nx\r\n0\r\nbad trailer line\r\n\r\n",
	}
	for name, body := range bodies {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(failsafe)))
		_, err = io.WriteString(c, "POST /"+name+" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, name)
		res.Body.Close()
		c.Close()
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, name)
	}
	waitFor(t, func() bool { return strings.Count(p.stderr(), "msg=request") == len(bodies) })
	assert.Equal(t, len(bodies), strings.Count(p.stderr(), "status=400"), p.stderr())
	assert.NotContains(t, p.stderr(), "level=ERROR")
}

// An upstream that answers before it has read the body, with a body that its connection's close
// ends, and a client that leaves partway through its chunked body: the transport closes its
// connection to the upstream when the client's body fails, and the copy of the answer then fails
// on that closed connection. The reverse proxy's line about it is the client's doing, not logged
// at ERROR: it was, one an aborted upload.
func TestProxyLogsNoErrorWhenAClientLeavesAnEarlyAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for { // the request's head; its body is never read
					line, err := r.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\no")
				time.Sleep(500 * time.Millisecond)
				_, _ = io.WriteString(c, "k")
			}()
		}
	}()
	p := startProxy(t, "-upstream", "http://"+ln.Addr().String(), "-rate", "1000/1m")
	const rounds = 6
	var wg sync.WaitGroup
	for range rounds {
		c, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		require.NoError(t, err)
		wg.Go(func() {
			// Long enough for the answer's head to reach the proxy before the client leaves.
			time.Sleep(200 * time.Millisecond)
			_ = c.Close()
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // past the upstream's 500 ms: every copy has ended
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.exitedOK(t)
	assert.NotContains(t, p.stderr(), "level=ERROR")
}

// An upgraded connection's access-log line, written when it closes, says 101: the reverse proxy
// writes the upstream's 101 on the hijacked connection, past the status the log reads, which then
// said 200.
func TestProxyLogsAnUpgradeAs101(t *testing.T) {
	up := newUpgradeUpstream(t)
	p := startProxy(t, "-upstream", up.URL, "-log-admitted", "1")
	ws := dialUpgraded(t, p)
	got, err := ws.echo("hi")
	require.NoError(t, err)
	require.Equal(t, "hi", got)
	require.NoError(t, ws.conn.Close())
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "path=/ws") })
	assert.Regexp(t, `status=101 .*path=/ws `, p.stderr())
}

// An upstream that does not answer within -upstream-timeout gets the client a 504, logged with
// the path; one that refuses the connection, a 502. Without the flag's limit a hung upstream
// held the client until it gave up.
func TestProxyUpstreamTimeoutIs504(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	p := startProxy(t, "-upstream", slow.URL, "-upstream-timeout", "200ms")
	c := newClient(t, true)
	r := do(t, c, p.url("/slow"), nil)
	assert.Equal(t, http.StatusGatewayTimeout, r.status)
	logged := regexp.MustCompile(`upstream did not answer in time: .* path=/slow`)
	waitFor(t, func() bool { return logged.MatchString(p.stderr()) })

	dead := startProxy(t, "-upstream", "http://127.0.0.1:1")
	r = do(t, c, dead.url("/x"), nil)
	assert.Equal(t, http.StatusBadGateway, r.status)
	assert.Empty(t, r.body, "without -problem-json, no body, as the standard reverse proxy answers")

	// Under -problem-json the proxy's own errors are problems too, as its refusals are.
	for _, tc := range []struct {
		args   []string
		status int
	}{
		{[]string{"-upstream", slow.URL, "-upstream-timeout", "200ms", "-problem-json"}, http.StatusGatewayTimeout},
		{[]string{"-upstream", "http://127.0.0.1:1", "-problem-json"}, http.StatusBadGateway},
	} {
		p := startProxy(t, tc.args...)
		res, err := c.Get(p.url("/p"))
		require.NoError(t, err)
		var prob struct {
			Type   string `json:"type"`
			Title  string `json:"title"`
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&prob), "%v: a problem+json body", tc.args)
		res.Body.Close()
		assert.Equal(t, tc.status, res.StatusCode)
		assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		assert.Equal(t, "about:blank", prob.Type)
		assert.Equal(t, tc.status, prob.Status)
		assert.Equal(t, http.StatusText(tc.status), prob.Title)
		assert.NotEmpty(t, prob.Detail)
		assert.NotContains(t, prob.Detail, "127.0.0.1", "the upstream's address is for the log, not the client")
	}
}

// A client that hangs up while its request waits under -max-delay is logged with status 499, not
// 429: the refusal that ended the wait reached nobody. The requests answered 429 while it waited
// are still logged 429.
func TestProxyLogsAClientGoneDuringMaxDelayAs499(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	p := startProxy(t, "-upstream", up.URL, "-rate", "1/1m", "-policy", "gcra", "-max-delay", "1m", "-max-waiting", "1", "-log-refused", "1")
	c := newClient(t, true)
	first, err := c.Get(p.url("/"))
	require.NoError(t, err)
	first.Body.Close()
	require.Equal(t, 200, first.StatusCode)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", p.url("/"), nil)
		res, err := newClient(t, true).Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	// With -max-waiting 1, another request is refused at once only while the second one waits.
	time.Sleep(300 * time.Millisecond) // long enough for a loaded machine to have the second request waiting
	deadline := time.Now().Add(failsafe)
	probes := 0
	for {
		select {
		case err := <-done:
			t.Fatalf("the second request was answered before its client gave up (err %v)", err)
		default:
		}
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(pctx, "GET", p.url("/"), nil)
		res, err := newClient(t, true).Do(req)
		pcancel()
		if err == nil {
			res.Body.Close()
			require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			probes++
			break
		}
		require.True(t, time.Now().Before(deadline), "the second request never waited")
	}
	cancel()
	require.Error(t, <-done, "the waiting request's client gave up")
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "status=499") })
	assert.Equal(t, 1, strings.Count(p.stderr(), "status=499"), p.stderr())
	assert.GreaterOrEqual(t, strings.Count(p.stderr(), "status=429"), probes, "the probes answered 429 are logged 429")
}

// writeRules writes a -config file of n rules, rule formatted with each index from 0, and returns
// its path: a large file, whose limiters take a while to build.
func writeRules(t *testing.T, n int, rule string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n {
		fmt.Fprintf(&b, rule, i)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// The client chooses the method and the path, so a log line holds only their first 32 and 128
// bytes: the access line of a refusal (logged by default) and a 502's error line wrote a
// megabyte-long method or path whole, for every request that sent one.
func TestProxyLogLinesCapWhatTheClientChooses(t *testing.T) {
	p := startProxy(t, "-upstream", "http://127.0.0.1:1", "-limit", "1")
	c := newClient(t, true)
	method, path := strings.Repeat("M", 1000), "/"+strings.Repeat("p", 1000)
	for want := range []int{http.StatusBadGateway, http.StatusTooManyRequests} {
		req, err := http.NewRequest(method, p.url(path), nil)
		require.NoError(t, err)
		res, err := c.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, []int{http.StatusBadGateway, http.StatusTooManyRequests}[want], res.StatusCode)
	}
	waitFor(t, func() bool { return strings.Contains(p.stderr(), "status=429") })
	var errLine, accessLine string
	for _, l := range strings.Split(p.stderr(), "\n") {
		switch {
		case strings.Contains(l, "proxy error"):
			errLine = l
		case strings.Contains(l, "status=429"):
			accessLine = l
		}
	}
	assert.Contains(t, errLine, "path=/"+strings.Repeat("p", 127)+"…")
	assert.Contains(t, accessLine, "method="+strings.Repeat("M", 32)+"…")
	assert.Contains(t, accessLine, "path=/"+strings.Repeat("p", 127)+"…")
	for _, l := range []string{errLine, accessLine} {
		assert.Less(t, len(l), 600, "a line of %d bytes: %.200s", len(l), l)
	}
}
