package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/batched"
)

// w0 is the start of a minute (and of every window that divides one): 28_333_333 × 60_000 ms.
const w0 = int64(1_699_999_980_000)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// inProcess is the real proxy handler, parsed from real flags, served by a real server in this
// process, with its in-process limiters on a manual clock, in front of a real upstream.
type inProcess struct {
	px  *proxy
	srv *httptest.Server
	up  *upstream
	log *syncBuffer
	clk *clock.Clock
}

func startInProcess(t *testing.T, startMs int64, args ...string) *inProcess {
	t.Helper()
	ip := &inProcess{up: newUpstream(t), log: &syncBuffer{}, clk: clock.NewManual(startMs)}
	c, fs := proxyFlags(io.Discard)
	require.NoError(t, parseFlags(fs, append([]string{"-upstream", ip.up.URL}, args...)))
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	c.clk = ip.clk
	px, err := buildProxy(c, slog.New(slog.NewTextHandler(ip.log, nil)))
	require.NoError(t, err)
	t.Cleanup(px.close)
	ip.px = px
	ip.srv = httptest.NewUnstartedServer(px.handler)
	ip.srv.Config.ConnContext = httplimit.ConnContext
	ip.srv.Start()
	t.Cleanup(ip.srv.Close)
	return ip
}

func (ip *inProcess) get(t *testing.T, path string, header map[string]string) resp {
	t.Helper()
	return do(t, ip.srv.Client(), ip.srv.URL+path, header)
}

// On a refusal, t is the time until the quota is available again, equal to Retry-After: the
// operator's case of two requests at second 6 of a 10 s window and two at 0.5 s into the next.
func TestRefusalTEqualsRetryAfter(t *testing.T) {
	p := startInProcess(t, w0+6000, "-limit", "2", "-window", "10s")
	assert.Equal(t, `"default";r=1;t=4`, p.get(t, "/", nil).rateLimit)
	assert.Equal(t, `"default";r=0;t=4`, p.get(t, "/", nil).rateLimit)
	p.clk.Advance(4500 * time.Millisecond)
	// 0.5 s in: the previous 2 carry floor(2 × 9.5/10) = 1, so one more passes. The next must
	// wait until the carried weight is 0: floor(2 × (10000-e)/10000) = 0 from e = 5001 ms, 4.501 s
	// away, so both t and Retry-After are 5.
	assert.Equal(t, resp{status: 200, body: "upstream saw /", policy: `"default";q=2;w=10`, rateLimit: `"default";r=0;t=10`}, p.get(t, "/", nil))
	assert.Equal(t, resp{status: 429, body: "rate limit exceeded\n", policy: `"default";q=2;w=10`, rateLimit: `"default";r=0;t=5`, retryAfter: "5"}, p.get(t, "/", nil))
}

// Several -rate limits: all must admit, a refusal by one consumes nothing of the others, and
// both fields list them.
func TestSeveralRates(t *testing.T) {
	p := startInProcess(t, w0, "-policy", "fixed-window", "-rate", "2/1s", "-rate", "3/1m")
	const pol = `"default-1s";q=2;w=1, "default-1m";q=3;w=60`
	assert.Equal(t, resp{200, "upstream saw /", pol, `"default-1s";r=1;t=1, "default-1m";r=2;t=60`, ""}, p.get(t, "/", nil))
	assert.Equal(t, 200, p.get(t, "/", nil).status)
	// Refused by the per-second limit, which is asked first; the minute is not charged, and is
	// shown as it stands.
	assert.Equal(t, resp{429, "rate limit exceeded\n", pol, `"default-1s";r=0;t=1, "default-1m";r=1;t=60`, "1"}, p.get(t, "/", nil))
	p.clk.Advance(time.Second)
	assert.Equal(t, resp{200, "upstream saw /", pol, `"default-1s";r=1;t=1, "default-1m";r=0;t=59`, ""}, p.get(t, "/", nil))
	// Refused by the minute: the second's unit is given back, and shows.
	assert.Equal(t, resp{429, "rate limit exceeded\n", pol, `"default-1s";r=1;t=1, "default-1m";r=0;t=59`, "59"}, p.get(t, "/", nil))
	assert.Equal(t, int64(3), p.up.hits.Load())
}

// Bucket policies below one unit per second: nginx's 10r/m as a token bucket of burst 10 that
// refills one unit every 6 s, and the default 100/1m.
func TestBucketBelowOnePerSecond(t *testing.T) {
	p := startInProcess(t, w0, "-policy", "token-bucket", "-rate", "10r/m")
	for i := range 10 {
		r := p.get(t, "/", nil)
		require.Equal(t, 200, r.status, "request %d", i)
		// The bucket is full again (i+1) × 6 s after it was full.
		assert.Equal(t, `"default";r=`+strconv.Itoa(9-i)+`;t=`+strconv.Itoa(6*(i+1)), r.rateLimit, "request %d", i)
	}
	assert.Equal(t, resp{429, "rate limit exceeded\n", `"default";q=10;w=60`, `"default";r=0;t=6`, "6"}, p.get(t, "/", nil))
	p.clk.Advance(5999 * time.Millisecond)
	assert.Equal(t, "1", p.get(t, "/", nil).retryAfter, "1 ms short of one unit")
	p.clk.Advance(time.Millisecond)
	assert.Equal(t, 200, p.get(t, "/", nil).status)
	assert.Equal(t, 429, p.get(t, "/", nil).status)

	for _, id := range []string{"token-bucket", "gcra", "leaky-bucket"} {
		d := startInProcess(t, w0, "-policy", id) // the defaults, -limit 100 -window 1m
		r := d.get(t, "/", nil)
		assert.Equal(t, 200, r.status, id)
		assert.Equal(t, `"default";q=100;w=60`, r.policy, id)
	}
}

// A bucket limit that was not asked and holds part of a request, but not a whole one, lengthens
// Retry-After to its own wait for a whole request. Scaled by k = 20 here (3/1m needs a twentieth of
// a request a second), its Peek answered for one twentieth, and Retry-After said 1 s where the
// minute's bucket had no whole request for 18 s.
func TestRetryAfterWaitsForAWholeRequestOfAScaledBucket(t *testing.T) {
	for _, id := range []string{"token-bucket", "gcra", "leaky-bucket"} {
		p := startInProcess(t, w0, "-policy", id, "-rate", "1/1s", "-rate", "3/1m")
		for i := range 3 {
			if i > 0 {
				p.clk.Advance(1020 * time.Millisecond)
			}
			require.Equal(t, 200, p.get(t, "/", nil).status, "%s: request %d", id, i)
		}
		// The minute's bucket: 60 units (k = 20), 20 a request, one back a second: 2 units left
		// after three requests 2.04 s apart, 18 more in 18 s. The second's is empty for 1 s.
		r := p.get(t, "/", nil)
		assert.Equal(t, 429, r.status, id)
		assert.Equal(t, "18", r.retryAfter, id)
		p.clk.Advance(17 * time.Second)
		assert.Equal(t, 429, p.get(t, "/", nil).status, "%s: 17 s later the minute's bucket still has no whole request", id)
		p.clk.Advance(time.Second)
		assert.Equal(t, 200, p.get(t, "/", nil).status, "%s: 18 s later it has", id)
	}
}

// A bucket limit whose unit is given back, because a later limit refused, shows the bucket as it
// stands again: its t (the bucket full again) moves back with the unit. It said twice the wait,
// as if the unit were still taken, until the next admission.
func TestGivenBackBucketShowsItsState(t *testing.T) {
	p := startInProcess(t, w0, "-policy", "token-bucket", "-rate", "5/1h", "-rate", "1/1m")
	r := p.get(t, "/", nil)
	require.Equal(t, 200, r.status)
	assert.Contains(t, r.rateLimit, `"default-1h";r=4;t=720`)
	p.clk.Advance(time.Second)
	for range 3 {
		r = p.get(t, "/", nil)
		require.Equal(t, 429, r.status)
		// One unit out, refilling at one per 720 s: full again 719 s from now.
		assert.Contains(t, r.rateLimit, `"default-1h";r=4;t=719`, "the hour's unit was given back")
	}
}

func TestBucketScale(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		limits []int64
		want   int64
	}{
		{time.Minute, []int64{100}, 3},      // 5 per second over a burst of 300
		{time.Minute, []int64{10}, 6},       // 1 per second, burst 60
		{time.Second, []int64{7}, 1},        // already whole
		{time.Hour, []int64{1}, 3600},       // 1 per second, burst 3600
		{time.Minute, []int64{100, 33}, 60}, // the fleet's 100 and a share of 33, in one unit
		{1500 * time.Millisecond, []int64{3}, 1},
	} {
		k, err := bucketScale(tc.window, tc.limits...)
		require.NoError(t, err)
		assert.Equal(t, tc.want, k, "%v %v", tc.window, tc.limits)
		for _, l := range tc.limits {
			assert.Zero(t, 1000*k*l%tc.window.Milliseconds(), "%v %v: whole tokens per second", tc.window, tc.limits)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]rate{
		"10/1s": {10, time.Second}, "1000/1h": {1000, time.Hour}, "10r/s": {10, time.Second},
		"10r/m": {10, time.Minute}, "5/90s": {5, 90 * time.Second}, "7/2d": {7, 48 * time.Hour},
		"3/250ms": {3, 250 * time.Millisecond}, "10/ms": {10, time.Millisecond}, "10/h": {10, time.Hour},
		"10/d": {10, 24 * time.Hour},
	} {
		got, err := parseRate(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]string{
		"10":      "write LIMIT/WINDOW",
		"x/1s":    `the limit "x" is not a whole number`,
		"10/60":   "add a unit, like 60s",
		"10/1.5x": "is not a duration",
		"10/0s":   "must be a whole number of milliseconds",
	} {
		_, err := parseRate(in)
		assert.ErrorContains(t, err, want, in)
	}
}

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

// A duration past time.Duration's range is too long, not malformed: time.ParseDuration calls
// both invalid, and the command said "not a duration: write a number and a unit" to a value
// that had both.
func TestParseDurationTooLong(t *testing.T) {
	for _, in := range []string{"100000000h", "2562048h", "99999999999d", "100000000000000000000d", "9223372036855ms"} {
		_, err := parseDuration(in)
		assert.EqualError(t, err, fmt.Sprintf("%q is too long: a duration is at most 2562047h (about 292 years)", in), in)
	}
	for _, in := range []string{"5x", "1e3s", "h", "d", "1d1d", "1d-2h", "1d+2h", "2h1d", "1dx", "1 d", "inf", "NaN", "1e3", "0x10"} {
		_, err := parseDuration(in)
		assert.ErrorContains(t, err, "is not a duration", in)
	}
	// Days lead, whole, in part, or with smaller units after them, as the hours of
	// time.ParseDuration do.
	for in, want := range map[string]time.Duration{
		"1d": 24 * time.Hour, "1.5d": 36 * time.Hour, ".5d": 12 * time.Hour, "0.1d": 144 * time.Minute,
		"1d2h": 26 * time.Hour, "2d30m15s": 48*time.Hour + 30*time.Minute + 15*time.Second,
		"-5d": -120 * time.Hour, "+1d500ms": 24*time.Hour + 500*time.Millisecond,
	} {
		d, err := parseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, d, in)
	}
	for _, in := range []string{"106751d23h47m16.854775808s", "106751.999d"} {
		_, err := parseDuration(in)
		assert.ErrorContains(t, err, "is too long", in)
	}
	d, err := parseDuration("2562047h")
	require.NoError(t, err)
	assert.Equal(t, 2562047*time.Hour, d)
	d, err = parseDuration("106751d")
	require.NoError(t, err)
	assert.Equal(t, 106751*24*time.Hour, d)
}

// Each process's share of a limit while Redis is down rounds down, so that the fleet together
// never admits more than the limit, and is at least 1.
func TestFleetShare(t *testing.T) {
	assert.Equal(t, int64(100), fleetShare(100, 1))
	assert.Equal(t, int64(33), fleetShare(100, 3))
	assert.Equal(t, int64(1), fleetShare(2, 5))
}

// -max-keys: a new key beyond the cap gets 503, and the metric says key_cap.
func TestKeyCap(t *testing.T) {
	p := startInProcess(t, w0, "-max-keys", "1", "-trusted-proxies", "127.0.0.1", "-limit", "5")
	assert.Equal(t, 200, p.get(t, "/", map[string]string{"X-Forwarded-For": "203.0.113.1"}).status)
	r := p.get(t, "/", map[string]string{"X-Forwarded-For": "203.0.113.2"})
	assert.Equal(t, 503, r.status)
	assert.Equal(t, "rate limiter at its key capacity\n", r.body)
	assert.Equal(t, "1", r.retryAfter)
	m := httptest.NewRecorder()
	p.px.metrics.ServeHTTP(m, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, m.Body.String(), `slidelimit_decisions_total{decision="denied",reason="key_cap",rule="default"} 1`+"\n")
}

// -expected-keys: each in-process limiter's tables are sized for that many keys at start (24.5 bytes
// a key at 100,000), and limit as they would without it.
func TestExpectedKeys(t *testing.T) {
	for _, c := range []struct {
		args      []string
		min, most uint64
	}{
		{nil, 0, 64 * 1024},
		{[]string{"-expected-keys", "100000"}, 100000 * 20, 100000*25 + 64*1024}, // 391 a shard: 479 with headroom
	} {
		p := startInProcess(t, w0, append([]string{"-trusted-proxies", "127.0.0.1", "-limit", "2"}, c.args...)...)
		assert.Equal(t, 200, p.get(t, "/", map[string]string{"X-Forwarded-For": "203.0.113.1"}).status)
		assert.Equal(t, 200, p.get(t, "/", map[string]string{"X-Forwarded-For": "203.0.113.1"}).status)
		assert.Equal(t, 429, p.get(t, "/", map[string]string{"X-Forwarded-For": "203.0.113.1"}).status, "%v", c.args)
		var engines int
		for _, b := range p.px.built {
			if b.eng == nil {
				continue
			}
			engines++
			var st engine.Stats
			b.eng.Stats(&st)
			assert.GreaterOrEqual(t, st.TableBytes, c.min, "%v", c.args)
			assert.LessOrEqual(t, st.TableBytes, c.most, "%v", c.args)
		}
		assert.Equal(t, 1, engines, "%v: one rule, one limit", c.args)
	}
}

// -exempt-cidrs: a client in the range is never limited and gets no field; the metric counts it.
func TestExemptCIDR(t *testing.T) {
	p := startInProcess(t, w0, "-limit", "1", "-trusted-proxies", "127.0.0.1", "-exempt-cidrs", "198.51.100.0/24")
	for range 3 {
		r := p.get(t, "/", map[string]string{"X-Forwarded-For": "198.51.100.9"})
		assert.Equal(t, resp{status: 200, body: "upstream saw /"}, r)
	}
	assert.Equal(t, 200, p.get(t, "/", map[string]string{"X-Forwarded-For": "203.0.113.9"}).status)
	assert.Equal(t, 429, p.get(t, "/", map[string]string{"X-Forwarded-For": "203.0.113.9"}).status)
	m := httptest.NewRecorder()
	p.px.metrics.ServeHTTP(m, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, m.Body.String(), `slidelimit_exempt_total{why="cidr"} 3`+"\n")
}

// Config files that are refused, each with an error naming the rule and the field.
func TestParseConfigErrors(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	for in, want := range map[string]string{
		"rules: [": "line 1: did not find expected node content",
		"rules:\n  - name: a\n    rates: [1/1s]\n    colour: x\n": `line 4: rules[0] (a): unknown field "colour" (want name, methods, paths, rates, policy, key)`,
		"rulez: []\n":                            `line 1: the file: unknown field "rulez" (want exempt, rules)`,
		"exempt:\n  path: [/x]\n":                `line 2: exempt: unknown field "path" (want paths, cidrs)`,
		"rules:\n  - name: a\n    rates: 1/1s\n": "line 3: rules[0] (a): rates: want a list, like [10/1s, 1000/1h]",
		"rules:\n  - name: a\n    rates: [1/1s]\n    policy: bogus\n":                       `rules[0] (a): policy "bogus": unknown policy; one of sliding-counter,`,
		"rules:\n  - rates: [1/1s]\n":                                                       `rules[0]: name "": must be 1 to 64 characters`,
		"rules:\n  - name: a b\n    rates: [1/1s]\n":                                        `name "a b": only letters, digits`,
		"rules:\n  - name: default\n    rates: [1/1s]\n":                                    `name "default" is used twice`,
		"rules:\n  - name: a\n":                                                             "rules[0] (a): rates: at least one",
		"rules:\n  - name: a\n    rates: [1/1s, 5/1m]\n  - name: a-1m\n    rates: [9/1m]\n": `rules[1] (a-1m) and rules[0] (a)'s 1m limit are both named "a-1m"`,
		"rules:\n  - name: a-1s\n    rates: [9/1h]\n  - name: a\n    rates: [1/1s, 5/1m]\n": `rules[1] (a)'s 1s limit and rules[0] (a-1s) are both named "a-1s"`,
		"rules:\n  - name: a\n    rates: [1/60]\n":                                          "rules[0] (a): rates: \"1/60\": the window 60 has no unit",
		"rules:\n  - name: a\n    rates: [1/1s, 2/1s]\n":                                    "two limits with the window 1s",
		"rules:\n  - name: a\n    rates: [1/1s]\n    key: cookie\n":                         `key "cookie": must be ip, header:NAME, conn or path`,
		"rules:\n  - name: a\n    rates: [1/1s]\n    paths: [api]\n":                        `paths: "api" must start with /`,
		"rules:\n  - name: a\n    rates: [1/1s]\n    paths: [/admin//]\n":                   `paths: "/admin//" is matched against clean paths, so write it as "/admin/"`,
		"exempt:\n  paths: [/a/./b]\n":                                                      `exempt.paths: "/a/./b" is matched against clean paths, so write it as "/a/b"`,
		"exempt:\n  paths: ['/a\\b']\n":                                                     `exempt.paths: "/a\\b" holds a backslash`,
		"rules:\n  - name: a\n    rates: [1/1s]\n    paths: ['/search?q=x']\n":              `paths: "/search?q=x" holds '?': prefixes match the request's path, never its query or fragment`,
		"exempt:\n  paths: ['/a#b']\n":                                                      `exempt.paths: "/a#b" holds '#'`,
		"rules:\n  - name: a\n    rates: [1/1s]\n    paths: ['/api;v=2/x']\n":               `paths: "/api;v=2/x" holds a ;parameter, which rules match without: write "/api/x"`,
		"exempt:\n  cidrs: [10.0.0.0/33]\n":                                                 `exempt.cidrs: "10.0.0.0/33"`,
		"exempt:\n  cidrs: [\"::ffff:10.0.0.0/95\"]\n":                                      `exempt.cidrs: httplimit: "::ffff:10.0.0.0/95": an IPv4-mapped IPv6 range must be /96 or longer`,
	} {
		_, err := parseConfig([]byte(in), def)
		assert.ErrorContains(t, err, want, "%q", in)
		if err != nil {
			assert.NotContains(t, err.Error(), "main.", "%q: no Go type names", in)
			assert.NotContains(t, err.Error(), "\n", "%q: one line", in)
			assert.NotContains(t, err.Error(), "-policy", "%q: the file's field, not the flag", in)
		}
	}
	spec, err := parseConfig([]byte("rules:\n  - name: a\n    methods: [post]\n    paths: [/x]\n    rates: [1/1s]\n"), def)
	require.NoError(t, err)
	require.Len(t, spec.rules, 2)
	assert.True(t, spec.rules[0].matches("POST", "/x/y", true))
	assert.True(t, spec.rules[0].matches("POST", "/xy", true), "a plain string prefix, as the README says, not a whole segment")
	assert.False(t, spec.rules[0].matches("GET", "/x/y", true))
	assert.True(t, spec.rules[0].matches("post", "/x/y", true), "a method in any case, as servers that upper-case it see it")
	assert.True(t, spec.rules[0].matches("Post", "/x/y", true))
	assert.False(t, spec.rules[0].matches("POST", "/y", true))
	assert.True(t, spec.rules[1].matches("GET", "/anything", true), "the command line's rule matches everything")
}

// A list item yaml would drop or cannot read as text, an empty methods or paths list (which would
// match everything), and a name given twice are refused with the line, the rule and the field.
func TestParseConfigRefusesItemsThatWouldWidenARule(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	for in, want := range map[string]string{
		"rules:\n  - {name: a, rates: [5/1m], methods: [~]}\n":                              "line 2: rules[0] (a): methods: an empty item (~ or null); remove it or give a value",
		"rules:\n  - name: a\n    rates: [5/1m]\n    paths: [/x, null]\n":                   "line 4: rules[0] (a): paths: an empty item (~ or null)",
		"exempt:\n  paths: [~]\n":                                                           "line 2: exempt.paths: an empty item (~ or null)",
		"rules:\n  - {name: a, rates: [5/1m], paths: []}\n":                                 "line 2: rules[0] (a): paths: an empty list; leave the field out, or write ~, to match every path",
		"rules:\n  - {name: a, rates: [5/1m], methods: []}\n":                               "line 2: rules[0] (a): methods: an empty list; leave the field out, or write ~, to match every method",
		"rules:\n  - {name: a, rates: [5/1m], methods: [\"POST,PUT\"]}\n":                   `rules[0] (a): methods: "POST,PUT" is not an HTTP method`,
		"rules:\n  - {name: a, rates: [5/1m], methods: [\"GET;\"]}\n":                       `rules[0] (a): methods: "GET;" is not an HTTP method`,
		"rules:\n  - {name: a, rates: [5/1m], methods: [\"G\\0T\"]}\n":                      `rules[0] (a): methods: "G\x00T" is not an HTTP method`,
		"rules:\n  - name: a\n    rates: [5/1m]\n    paths:\n#     - /admin\n":              "line 4: rules[0] (a): paths: an empty list; leave the field out, or write ~, to match every path",
		"rules:\n  - name: a\n    rates: [5/1m]\n    paths: [/a, !!float x]\n":              `line 4: rules[0] (a): paths: "x" is not a value this field takes`,
		"rules:\n  - name: a\n    rates: [5/1m]\n    key: !!int ip\n":                       `line 4: rules[0] (a): key: "ip" is not a value this field takes`,
		"rules:\n  - name: a\n    name: b\n    rates: [5/1m]\n":                             `line 3: rules[0] (a): field "name" given twice`,
		"rules:\n  - {name: a, rates: [5/1m]}\n---\nrules:\n  - {name: b, rates: [1/1s]}\n": "line 3: a second YAML document (each --- starts one); put every rule and exemption in one",
	} {
		_, err := parseConfig([]byte(in), def)
		assert.ErrorContains(t, err, want, "%q", in)
		if err != nil {
			assert.NotContains(t, err.Error(), "(a) (b)", "%q", in)
		}
	}
}

// A file that configures nothing (empty, comments only, no rules and no exemptions) is refused:
// more often it is one read half written, between an editor's truncate and its write, and
// applied it would drop every rule and reset its counts until the next poll. One with only an
// exemption, or only a rule, is a configuration.
func TestParseConfigRefusesAnEmptyFile(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	for _, in := range []string{"", "\n", "# nothing yet\n", "rules:\n", "rules: ~\n", "rules: []\n", "exempt: {}\n", "---\n", "{}\n", "exempt:\n  paths: []\n"} {
		_, err := parseConfig([]byte(in), def)
		assert.ErrorContains(t, err, "no rules and no exemptions (an empty file, or one read while it was being written?)", "%q", in)
	}
	for _, in := range []string{"exempt:\n  paths: [/healthz]\n", "exempt:\n  cidrs: [10.0.0.0/8]\n", "rules:\n  - {name: a, rates: [5/1m]}\n"} {
		_, err := parseConfig([]byte(in), def)
		assert.NoError(t, err, "%q", in)
	}
}

// A -config file with aliases (*name) and merge keys (<<) is the file written out without them.
func TestParseConfigAliasesAndMerges(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	for in, want := range map[string]string{
		// An alias for a list, a single value and a whole section.
		"rules:\n  - name: a\n    rates: &r [5/1m]\n  - name: b\n    rates: *r\n":                                      "rules:\n  - name: a\n    rates: [5/1m]\n  - name: b\n    rates: [5/1m]\n",
		"rules:\n  - name: a\n    rates: [&one 1/1s]\n    key: &k conn\n  - name: b\n    rates: [*one]\n    key: *k\n": "rules:\n  - name: a\n    rates: [1/1s]\n    key: conn\n  - name: b\n    rates: [1/1s]\n    key: conn\n",
		"exempt: &e\n  paths: [/healthz]\n":                        "exempt:\n  paths: [/healthz]\n",
		"exempt:\n  paths: &p [/healthz]\n  cidrs: [10.0.0.0/8]\n": "exempt:\n  paths: [/healthz]\n  cidrs: [10.0.0.0/8]\n",
		// A merge key: a rule's own fields win over the merged ones, and in a list of maps the
		// first that has a field gives it.
		"rules:\n  - &base\n    name: a\n    rates: [5/1m]\n    policy: gcra\n    methods: [GET]\n  - <<: *base\n    name: b\n    methods: [POST]\n": "rules:\n  - name: a\n    rates: [5/1m]\n    policy: gcra\n    methods: [GET]\n  - name: b\n    rates: [5/1m]\n    policy: gcra\n    methods: [POST]\n",
		"rules:\n  - &x {name: a, rates: [1/1s], key: conn}\n  - &y {name: c, rates: [2/1s], paths: [/y]}\n  - <<: [*x, *y]\n    name: b\n":          "rules:\n  - {name: a, rates: [1/1s], key: conn}\n  - {name: c, rates: [2/1s], paths: [/y]}\n  - {name: b, rates: [1/1s], key: conn, paths: [/y]}\n",
		"exempt: ~\nrules:\n  - {name: a, rates: [1/1s]}\n":               "rules:\n  - {name: a, rates: [1/1s]}\n", // a null exempt, as a null rules, is none
		"rules:\n  - <<: {rates: [1/1s], <<: {key: conn}}\n    name: a\n": "rules:\n  - {name: a, rates: [1/1s], key: conn}\n",
		// An explicit ~ drops what a merge key gives: any method again.
		"rules:\n  - &b {name: a, rates: [1/1s], methods: [POST]}\n  - <<: *b\n    name: c\n    methods: ~\n": "rules:\n  - {name: a, rates: [1/1s], methods: [POST]}\n  - {name: c, rates: [1/1s]}\n",
	} {
		got, err := parseConfig([]byte(in), def)
		require.NoError(t, err, "%q", in)
		plain, err := parseConfig([]byte(want), def)
		require.NoError(t, err, "%q", want)
		assert.Equal(t, plain, got, "%q", in)
	}
	// What is wrong behind an alias or a merge key is named as it would be without them.
	for in, want := range map[string]string{
		"x: &r 5/1m\n": `line 1: the file: unknown field "x"`,
		"rules:\n  - name: a\n    rates: &r 5/1m\n  - name: b\n    rates: *r\n":  "line 3: rules[0] (a): rates: want a list",
		"rules:\n  - &b {rates: [1/1s], colour: red}\n  - <<: *b\n    name: c\n": `line 2: rules[0]: unknown field "colour"`,
		"base: &b {colour: red}\n":                                                             `unknown field "base"`,
		"rules:\n  - name: a\n    rates: [1/1s]\n    <<: {colour: red}\n":                      `line 4: rules[0] (a): unknown field "colour"`,
		"rules:\n  - name: a\n    rates: &r [1/1s]\n  - <<: *r\n    name: b\n":                 "line 4: rules[1] (b): <<: want a map, or a list of maps, to merge",
		"rules:\n  - &a {name: a, rates: [1/1s], <<: *a}\n":                                    "line 2: rules[0] (a): <<: merges a map into itself",
		"rules:\n  - name: a\n    rates: [1/1s]\n    \"<<\": {key: conn}\n":                    `line 4: rules[0] (a): unknown field "<<"`,
		"rules:\n  - name: a\n    rates: [1/1s]\n    <<: {key: conn}\n    <<: {paths: [/x]}\n": "line 5: rules[0] (a): <<: given twice",
		"rules:\n  - name: a\n    rates: [1/1s]\n    !!merge foo: {key: conn}\n":               `line 4: rules[0] (a): unknown field "foo"`,
	} {
		_, err := parseConfig([]byte(in), def)
		assert.ErrorContains(t, err, want, "%q", in)
	}
}

// An -upstream with a path is that path's prefix for every request, and one with a query adds it to
// every request's own, as the README says.
func TestUpstreamPathAndQueryPrefixEachRequest(t *testing.T) {
	up := newUpstream(t)
	p := startInProcess(t, w0, "-upstream", up.URL+"/base?k=v")
	assert.Equal(t, "upstream saw /base/api?k=v&q=1", p.get(t, "/api?q=1", nil).body)
	assert.Equal(t, "upstream saw /base/?k=v", p.get(t, "/", nil).body)
}

// Servlet containers (Tomcat, Jetty) drop every segment's ;parameters, and serve /api;x/admin as
// /api/admin: rules match the path without them, so a parameter cannot take a request out of its
// rule (before, /api;x/admin and /private;x/a fell to the command line's looser limit). The
// upstream still gets the path as sent.
func TestRulesMatchWithoutPathParameters(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("rules:\n  - {name: adm, paths: [/api/admin], rates: [1/1m]}\n  - {name: dir, paths: [/private/], rates: [1/1m]}\n"), 0o644))
	p := startInProcess(t, w0, "-limit", "100", "-config", cfg)
	assert.Equal(t, resp{status: 200, body: "upstream saw /api;x/admin", policy: `"adm";q=1;w=60`, rateLimit: `"adm";r=0;t=60`}, p.get(t, "/api;x/admin", nil))
	for _, path := range []string{"/api/admin", "/api;jsessionid=1/admin;y", "/api%3Bx/admin", "/;/api/admin", "/;x/api/admin", "/api/;x/admin", "/api/;/;/admin"} {
		r := p.get(t, path, nil)
		assert.Equal(t, 429, r.status, path)
		assert.Equal(t, `"adm";q=1;w=60`, r.policy, path)
	}
	assert.Equal(t, 200, p.get(t, "/private;x/a", nil).status)
	r := p.get(t, "/private/a", nil)
	assert.Equal(t, 429, r.status)
	assert.Equal(t, `"dir";q=1;w=60`, r.policy)
	assert.Equal(t, `"default";q=100;w=60`, p.get(t, "/api;x/other", nil).policy)
	// -key path keys the path without them too: varying them gave a fresh allowance each time.
	byPath := startInProcess(t, w0, "-limit", "1", "-key", "path")
	assert.Equal(t, 200, byPath.get(t, "/a;x=1", nil).status)
	assert.Equal(t, 429, byPath.get(t, "/a;x=2", nil).status)
	assert.Equal(t, 429, byPath.get(t, "/a", nil).status)
	assert.Equal(t, 429, byPath.get(t, "/;/a", nil).status, "an empty segment left by a parameter is merged")
	assert.Equal(t, 200, byPath.get(t, "/b", nil).status)
}

// Exempt prefixes, rules and -key path see the path as http.ServeMux cleans it, and the upstream
// is sent that path: dot segments and doubled slashes neither reach a limited path through an
// exempt prefix nor step around a rule or a per-path key.
func TestPathsAreMatchedCleanAndForwardedClean(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("rules:\n  - name: login\n    paths: [/login]\n    rates: [1/1m]\n"), 0o644))
	p := startInProcess(t, w0, "-limit", "1", "-exempt-paths", "/healthz", "-config", cfg)

	assert.Equal(t, resp{status: 200, body: "upstream saw /api?q=1", policy: `"default";q=1;w=60`, rateLimit: `"default";r=0;t=60`}, p.get(t, "/healthz/../api?q=1", nil))
	assert.Equal(t, 429, p.get(t, "/healthz/./../api", nil).status, "not exempt, and the same limit as /api")
	assert.Equal(t, 429, p.get(t, "/api", nil).status)
	assert.Equal(t, resp{status: 200, body: "upstream saw /healthz/"}, p.get(t, "/healthz//", nil), "still exempt, trailing slash kept")

	assert.Equal(t, 200, p.get(t, "/login/", nil).status)
	for _, path := range []string{"/login/", "//login/", "/./login/", "/x/../login/"} {
		r := p.get(t, path, nil)
		assert.Equal(t, 429, r.status, path)
		assert.Equal(t, `"login";q=1;w=60`, r.policy, path)
	}
	// Cleaning that would resolve an encoded / or . is refused: upstreams disagree on its meaning.
	for _, path := range []string{"/x/..%2Flogin/", "/a%2F..%2Fb", "/healthz/%2e%2e/api", "/healthz/.%2e/api"} {
		assert.Equal(t, 400, p.get(t, path, nil).status, path)
	}
	// So is a backslash, which some upstreams read as /: through an exempt prefix, or past a
	// rule's.
	for _, path := range []string{`/healthz\..\api`, "/healthz%5C..%5Capi", `/login\x`, "/login%5cx"} {
		r := p.get(t, path, nil)
		assert.Equal(t, 400, r.status, path)
		assert.Contains(t, r.body, "backslash", path)
	}
	// So is a dot segment with a ;parameter, which servlet containers read as the dot segment.
	for _, path := range []string{"/healthz/..;/api", "/x/..;x=1/login/", "/healthz/.;/../api", "/healthz/%2e%2e;/api", "/..;/login/"} {
		r := p.get(t, path, nil)
		assert.Equal(t, 400, r.status, path)
		assert.Contains(t, r.body, "(..;)", path)
	}
	for _, path := range []string{"/api;v=1", "/file.;x", "/a..;b"} { // ;parameters of other segments pass
		assert.NotEqual(t, 400, p.get(t, path, nil).status, path)
	}

	// Under -problem-json these 400s are problems, as the proxy's other errors are.
	prob := startInProcess(t, w0, "-problem-json")
	for _, path := range []string{"/a%2F..%2Fb", `/a\b`} {
		res, err := prob.srv.Client().Get(prob.srv.URL + path)
		require.NoError(t, err)
		var pr struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&pr), path)
		res.Body.Close()
		assert.Equal(t, 400, res.StatusCode, path)
		assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), path)
		assert.Equal(t, "about:blank", pr.Type, path)
		assert.Equal(t, 400, pr.Status, path)
		assert.NotEmpty(t, pr.Detail, path)
	}
	// A CONNECT with a path is cleaned too: it does not pass as exempt.
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "CONNECT /healthz/../api HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	status, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, status, " 429 ", "CONNECT /healthz/../api is /api, over its limit")

	byPath := startInProcess(t, w0, "-limit", "1", "-key", "path")
	assert.Equal(t, resp{status: 200, body: "upstream saw /a/b", policy: `"default";q=1;w=60`, rateLimit: `"default";r=0;t=60`}, byPath.get(t, "//a/./b", nil))
	for _, path := range []string{"/a/b", "/a//b", "/a/c/../b", "/a/b/."} {
		assert.Equal(t, 429, byPath.get(t, path, nil).status, "one key for every spelling of /a/b: %s", path)
	}
	// The client's escaping is kept: in a path already clean, and where cleaning keeps it.
	assert.Equal(t, "upstream saw /files/a%2Fb", byPath.get(t, "/files/a%2Fb", nil).body)
	assert.Equal(t, "upstream saw /files/c%2Fd", byPath.get(t, "//files/c%2Fd", nil).body)
	assert.Equal(t, int64(3), p.up.hits.Load(), "refused requests never reach the upstream")
	assert.Equal(t, int64(3), byPath.up.hits.Load())
}

// IPv4-mapped ranges in -trusted-proxies, -exempt-cidrs and exempt.cidrs are the IPv4 ranges they
// name, as a single mapped address already is: clients are compared by their IPv4 address.
func TestIPv4MappedRanges(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("exempt:\n  cidrs: [\"::ffff:203.0.113.0/120\"]\n"), 0o644))
	p := startInProcess(t, w0, "-limit", "1", "-trusted-proxies", "::ffff:127.0.0.0/104,::ffff:0.0.0.0/96",
		"-exempt-cidrs", "::ffff:198.51.100.0/120", "-config", cfg)
	xff := func(a string) map[string]string { return map[string]string{"X-Forwarded-For": a} }
	for range 2 {
		assert.Equal(t, resp{status: 200, body: "upstream saw /"}, p.get(t, "/", xff("198.51.100.9")), "-exempt-cidrs")
		assert.Equal(t, resp{status: 200, body: "upstream saw /"}, p.get(t, "/", xff("203.0.113.9")), "exempt.cidrs")
	}
	// Trusted, so each client has its own key, not the proxy's.
	assert.Equal(t, 200, p.get(t, "/", xff("192.0.2.1")).status)
	assert.Equal(t, 429, p.get(t, "/", xff("192.0.2.1")).status)
	assert.Equal(t, 200, p.get(t, "/", xff("192.0.2.2")).status)
	assert.Contains(t, p.log.String(), "-trusted-proxies 0.0.0.0/0 trusts a large part of the Internet", "::ffff:0.0.0.0/96 is every IPv4 address")
}

// A -config file is one YAML document: a trailing one that holds nothing (a last ---, a comment,
// a null, an empty map) is fine, and the one rule the file has is read; one that holds anything
// is refused.
func TestParseConfigTrailingEmptyDocument(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	const rules = "---\nrules:\n  - {name: a, rates: [5/1m], paths: [/x]}\n"
	for _, tail := range []string{"", "---\n", "---\n# nothing more\n", "...\n", "--- ~\n", "---\nnull\n", "---\n{}\n", "---\n---\n"} {
		spec, err := parseConfig([]byte(rules+tail), def)
		require.NoError(t, err, "%q", tail)
		require.Len(t, spec.rules, 2, "%q", tail)
		assert.Equal(t, "a", spec.rules[0].name, "%q", tail)
	}
	for _, tail := range []string{"---\nrules: []\n", "---\nx\n", "---\n''\n", "---\n- 1\n"} {
		_, err := parseConfig([]byte(rules+tail), def)
		assert.ErrorContains(t, err, "a second YAML document (each --- starts one)", "%q", tail)
	}
}

// The command line's limits with several windows are named like a rule's ("default-1m"), so a
// rule of that name is refused, as a rule of the name "default" is.
func TestParseConfigRefusesARuleNamedLikeTheCommandLinesLimit(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}, {1000, time.Hour}}, policyID: "sliding-counter", key: "ip"}
	_, err := parseConfig([]byte("rules:\n  - name: default-1h\n    rates: [1/1s]\n"), def)
	assert.ErrorContains(t, err, `rules[0] (default-1h) and the command line's 1h limit are both named "default-1h"`)
	_, err = parseConfig([]byte("rules:\n  - name: default-1s\n    rates: [1/1s]\n"), def)
	assert.NoError(t, err, "no limit of the command line's is named default-1s")
}

// An edit made while the proxy starts (after it read -config, before it polls) is picked up at
// the first poll: the watcher used to take the edited file as the one in use, and kept the
// rules read before the edit until the next change.
func TestConfigEditDuringStartIsPickedUp(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("rules:\n  - name: a\n    rates: [1/1h]\n"), 0o600))
	ip := startInProcess(t, 0, "-config", cfg, "-config-poll", "10ms")
	require.Len(t, ip.px.state.Load().rules, 2, "rule a and the default")
	require.NoError(t, os.WriteFile(cfg, []byte("rules:\n  - name: a\n    rates: [1/1h]\n  - name: b\n    rates: [1/1h]\n"), 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { ip.px.watchConfig(ctx, nil); close(watched) }()
	defer func() { cancel(); <-watched }()
	assert.Eventually(t, func() bool { return len(ip.px.state.Load().rules) == 3 }, 3*time.Second, 10*time.Millisecond,
		"the edit made before the watcher started was never read; log:\n%s", ip.log)
}

// A limit a reload drops is closed once requests may no longer use it, and then let go: its
// limiter is garbage, where every reload used to keep the old tables until the process exited.
func TestReloadReleasesRetiredLimiters(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	rule := func(n int) {
		require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, "rules:\n  - name: r\n    rates: [%d/1m]\n", n), 0o644))
	}
	rule(10)
	p := startInProcess(t, w0, "-config", cfg, "-config-poll", "0", "-shutdown-timeout", "1ms")
	var collected atomic.Int32
	const reloads = 4
	for i := range reloads {
		p.px.mu.Lock()
		for _, b := range p.px.built {
			if b.eng != nil && b.quota.Name == "r" {
				runtime.AddCleanup(b.eng, func(struct{}) { collected.Add(1) }, struct{}{})
			}
		}
		p.px.mu.Unlock()
		rule(11 + i)
		p.px.reload("test")
		require.Equal(t, i+1, strings.Count(p.log.String(), "config reloaded"), "reload %d:\n%s", i, p.log.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for collected.Load() < reloads {
		require.True(t, time.Now().Before(deadline), "%d of %d retired limiters collected; %d still retiring", collected.Load(), reloads, func() int {
			p.px.mu.Lock()
			defer p.px.mu.Unlock()
			return len(p.px.retiring)
		}())
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	p.px.mu.Lock()
	defer p.px.mu.Unlock()
	assert.Empty(t, p.px.retiring)
}

// The sums of retired Redis limiters' counts add every counter field, so that a counter added to
// redisstore.Stats or batched.Stats later is not silently dropped from the metrics that sum them.
func TestRetiredCountsAddEveryCounter(t *testing.T) {
	gauges := map[string]bool{"BreakerOpen": true, "DenyCacheKeys": true, "Fleet": true, "Offline": true, "Keys": true}
	check := func(name string, a, b any, add func()) {
		bv := reflect.ValueOf(b).Elem()
		for i := range bv.NumField() {
			if f := bv.Field(i); f.Kind() == reflect.Int64 {
				f.SetInt(int64(i + 1))
			}
		}
		add()
		av := reflect.ValueOf(a).Elem()
		for i := range av.NumField() {
			fn := av.Type().Field(i).Name
			if gauges[fn] {
				continue
			}
			require.Equal(t, reflect.Int64, av.Field(i).Kind(), "%s.%s: a counter that is not an int64, or a gauge to list", name, fn)
			require.Equal(t, int64(i+1), av.Field(i).Int(), "%s.%s is not summed", name, fn)
		}
	}
	var ea, eb redisstore.Stats
	check("redisstore.Stats", &ea, &eb, func() { addExactCounts(&ea, eb) })
	var ba, bb batched.Stats
	check("batched.Stats", &ba, &bb, func() { addBatchedCounts(&ba, bb) })
}

// HEAD falls under a rule for GET, whose handler most servers run for it: a rule that limits
// downloads by GET must limit HEAD too. A rule for POST does not take HEAD.
func TestRuleForGETTakesHEAD(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	pick := func(spec *configSpec, method, path string) string {
		i := firstMatch(len(spec.rules), func(i int) *ruleSpec { return &spec.rules[i] }, method, path)
		return spec.rules[i].name
	}
	spec, err := parseConfig([]byte("rules:\n  - {name: dl, methods: [get], paths: [/download], rates: [1/1m]}\n  - {name: up, methods: [POST], rates: [1/1m]}\n"), def)
	require.NoError(t, err)
	assert.Equal(t, "dl", pick(spec, "HEAD", "/download/big"))
	assert.Equal(t, "dl", pick(spec, "head", "/download/big"))
	assert.Equal(t, "default", pick(spec, "HEAD", "/x"), "a rule for POST does not take HEAD")
	assert.Equal(t, "up", pick(spec, "POST", "/download/big"))
	// A rule that lists HEAD itself decides HEAD where it matches, wherever it stands.
	spec, err = parseConfig([]byte("rules:\n  - {name: pages, methods: [GET], rates: [100/1m]}\n  - {name: probes, methods: [HEAD], rates: [1/1m]}\n"), def)
	require.NoError(t, err)
	assert.Equal(t, "probes", pick(spec, "HEAD", "/"))
	assert.Equal(t, "pages", pick(spec, "GET", "/"))
	// Where it does not match, a rule for GET still takes HEAD: a HEAD rule for /status took HEAD
	// /admin out of the GET rule for /admin, to the command line's looser limits.
	spec, err = parseConfig([]byte("rules:\n  - {name: admin, methods: [GET], paths: [/admin], rates: [1/1m]}\n  - {name: probe, methods: [HEAD], paths: [/status], rates: [100/1m]}\n"), def)
	require.NoError(t, err)
	assert.Equal(t, "admin", pick(spec, "HEAD", "/admin"))
	assert.Equal(t, "probe", pick(spec, "HEAD", "/status"))
	assert.Equal(t, "default", pick(spec, "GET", "/status"))
}

// A rule name that would break the one-line error (a newline, a terminal escape) is shown quoted.
func TestConfigErrorQuotesAnUnprintableName(t *testing.T) {
	def := ruleSpec{name: "default", rates: []rate{{100, time.Minute}}, policyID: "sliding-counter", key: "ip"}
	_, err := parseConfig([]byte("rules:\n  - name: \"lo\\ngin\\u001b[31m\"\n    ratez: [5/1m]\n"), def)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `rules[0] ("lo\ngin\x1b[31m"): unknown field "ratez"`)
	assert.NotContains(t, err.Error(), "\n")
	assert.NotContains(t, err.Error(), "\x1b")
}

// An authority-form CONNECT asks for a tunnel, which a reverse proxy does not open: refused with
// 400, where it missed every rule's paths and reached the upstream as "/".
func TestConnectAuthorityFormRefused(t *testing.T) {
	p := startInProcess(t, w0)
	conn, err := net.Dial("tcp", p.srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res.StatusCode)
	assert.Zero(t, p.up.hits.Load(), "the upstream was asked")
}

// A duration is several number-and-unit parts added up, as time.ParseDuration reads them in any
// order, except that days, which it does not know, come first where given.
func TestParseDurationParts(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"1h30m": 90 * time.Minute, "30m1h": 90 * time.Minute, "1d12h": 36 * time.Hour, "1.5d": 36 * time.Hour,
	} {
		if d, err := parseDuration(s); err != nil || d != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", s, d, err, want)
		}
	}
	if _, err := parseDuration("1h1d"); err == nil || !strings.Contains(err.Error(), `"1h1d" is not a duration`) {
		t.Errorf(`parseDuration("1h1d"): %v; want it refused, days after hours`, err)
	}
}

// A file rewritten in place is applied once it stops changing, not as the poller finds it half
// written: every prefix of this file parses (a list cut before a rule), and the poller used to
// apply whichever one a poll found, dropping the rules not yet written, and their counts.
func TestConfigRewrittenInPlaceIsAppliedOnceWhole(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rules.yaml")
	rule := func(i int) string { return fmt.Sprintf("  - name: r%d\n    rates: [1/1h]\n    paths: [/r%d]\n", i, i) }
	whole := "rules:\n"
	for i := range 2 {
		whole += rule(i)
	}
	require.NoError(t, os.WriteFile(cfg, []byte(whole), 0o600))
	// A poll every 300ms, a write every 20ms: only a writer stalled for 300ms would be read half
	// written.
	ip := startInProcess(t, 0, "-config", cfg, "-config-poll", "300ms")
	require.Len(t, ip.px.state.Load().rules, 3, "r0, r1 and the default")

	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { ip.px.watchConfig(ctx, nil); close(watched) }()
	defer func() { cancel(); <-watched }()
	f, err := os.OpenFile(cfg, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.WriteString("rules:\n")
	require.NoError(t, err)
	fewest := len(ip.px.state.Load().rules)
	for i := range 20 {
		_, err := f.WriteString(rule(i))
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
		fewest = min(fewest, len(ip.px.state.Load().rules))
	}
	require.NoError(t, f.Close())
	// The reload's log line follows the swap of its rules: wait for both.
	assert.Eventually(t, func() bool {
		return len(ip.px.state.Load().rules) == 21 && strings.Contains(ip.log.String(), "config reloaded")
	}, 5*time.Second, 10*time.Millisecond, "log:\n%s", ip.log)
	assert.Equal(t, 3, fewest, "a half-written file was applied; log:\n%s", ip.log)
	assert.Equal(t, 1, strings.Count(ip.log.String(), "config reloaded"), "log:\n%s", ip.log)
}

// TestTruncateCutsAtACharacter: a path cut for the log ends before a UTF-8 character that does
// not fit, not in its middle, and a path that fits is kept whole.
func TestTruncateCutsAtACharacter(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{"abcd", "abcd"},
		{"abcde", "abcd…"},
		{"abcé", "abc…"},                         // é is 2 bytes: its first at 3, its second past 4
		{"ab€x", "ab…"},                          // € is 3 bytes, from 2 to 5
		{"a\x80\x80\x80\x80x", "a\x80\x80\x80…"}, // no character starts near the cut: bytes, as before
	} {
		got := truncate(c.in, 4)
		if got != c.want {
			t.Errorf("truncate(%q, 4) = %q, want %q", c.in, got, c.want)
		}
		if utf8.ValidString(c.in) && !utf8.ValidString(got) {
			t.Errorf("truncate(%q, 4) = %q: cut a character", c.in, got)
		}
	}
}

// TestBucketScaleNamesTheShare: where a process's share of the limit is what forces the factor,
// the advice names the share: the limit itself was already a multiple of the window's seconds.
func TestBucketScaleNamesTheShare(t *testing.T) {
	_, err := bucketScale(7*time.Second, 4294967292, 858993458) // 7 × 613566756, and its fifth
	require.ErrorContains(t, err, "give a limit whose share for each process (the limit divided by the fleet's size) is a multiple of the window's seconds")
	_, err = bucketScale(time.Hour, 4294967295, 4294967295)
	require.ErrorContains(t, err, "give a limit that is a multiple of the window's seconds")
	// The limit forces the factor, and its share (700000000 = 7×10^8) would need none.
	_, err = bucketScale(7*time.Second, 3500000001, 700000000)
	require.ErrorContains(t, err, "give a limit that is a multiple of the window's seconds")
}
