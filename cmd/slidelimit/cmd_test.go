package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/policy"
)

func TestBuildPolicy(t *testing.T) {
	for _, tc := range []struct {
		id     string
		limit  int64
		window time.Duration
		want   policy.Policy
	}{
		{"sliding-counter", 100, time.Minute, policy.SlidingCounter{Limit: 100, Window: time.Minute}},
		{"fixed-window", 5, time.Second, policy.FixedWindow{Limit: 5, Window: time.Second}},
		{"sliding-log", 7, time.Hour, policy.SlidingLog{Limit: 7, Window: time.Hour}},
		{"token-bucket", 120, time.Minute, policy.TokenBucket{Rate: 2, Burst: 120}},
		{"gcra", 10, 500 * time.Millisecond, policy.GCRA{Rate: 20, Burst: 10}},
		{"leaky-bucket", 30, 10 * time.Second, policy.LeakyBucket{Rate: 3, Capacity: 30}},
	} {
		got, err := buildPolicy(tc.id, tc.limit, &tc.window)
		require.NoError(t, err, tc.id)
		assert.Equal(t, tc.want, got, tc.id)
	}
	for _, tc := range []struct {
		id     string
		limit  int64
		window time.Duration
		want   string
	}{
		{"sliding-counter", 0, time.Second, "-limit 0"},
		{"sliding-counter", 1 << 32, time.Second, "-limit 4294967296"},
		{"sliding-counter", 1, 0, "-window 0s"},
		{"sliding-counter", 1, 1500 * time.Microsecond, "-window 1.5ms"},
		{"sliding-log", 20_000, time.Second, "SlidingLog.Limit = 20000"},
		{"token-bucket", 100, time.Minute, "-limit 100 -window 1m0s is 1.667/s"},
		{"token-bucket", 1, 2 * time.Second, "is 0.500/s"},
		{"dual-bucket", 1, time.Second, `-policy "dual-bucket": unknown policy`},
	} {
		_, err := buildPolicy(tc.id, tc.limit, &tc.window)
		assert.ErrorContains(t, err, tc.want, "%s %d %v", tc.id, tc.limit, tc.window)
	}
}

// With no command, or with flags first, the command runs the benchmark.
func TestRunDispatch(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"-keys", "500", "-duration", "20ms"}, &stdout, &stderr)
	assert.Equal(t, exitOK, code, stderr.String())
	assert.Contains(t, stdout.String(), "slidelimit bench: sliding-counter, limit 10 per 1s, 500 keys")

	stdout.Reset()
	assert.Equal(t, exitOK, run([]string{"help"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "slidelimit proxy [flags]")

	// help COMMAND is COMMAND -h; an unknown command or a second one is a bad command line.
	// It writes on stdout, as help does, so that it can be paged; "help -h" is help.
	var helpOut, flagOut bytes.Buffer
	stderr.Reset()
	assert.Equal(t, exitOK, run([]string{"help", "proxy"}, &helpOut, &stderr))
	assert.Empty(t, stderr.String())
	assert.Equal(t, exitOK, run([]string{"proxy", "-h"}, &flagOut, &flagOut))
	assert.Contains(t, helpOut.String(), "-upstream")
	assert.Equal(t, flagOut.String(), helpOut.String())
	for _, h := range []string{"-h", "-help", "--help"} {
		stdout.Reset()
		assert.Equal(t, exitOK, run([]string{"help", h}, &stdout, &stderr), h)
		assert.Contains(t, stdout.String(), "slidelimit proxy [flags]", h)
	}
	for _, args := range [][]string{{"help", "nosuch"}, {"help", "proxy", "rls"}, {"help", "-x"}} {
		stderr.Reset()
		assert.Equal(t, exitUsage, run(args, &stdout, &stderr), "%v", args)
		assert.NotEmpty(t, stderr.String(), "%v", args)
	}

	stderr.Reset()
	assert.Equal(t, exitUsage, run([]string{"serve"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `unknown command "serve"`)

	stderr.Reset()
	assert.Equal(t, exitUsage, run([]string{"bench", "-dist", "pareto"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `-dist "pareto"`)

	// bench and load read durations as proxy and rls do: a day unit, and "add a unit".
	for _, args := range [][]string{{"bench", "-window", "5"}, {"bench", "-duration", "5"}, {"load", "-duration", "5"}} {
		stderr.Reset()
		assert.Equal(t, exitUsage, run(args, &stdout, &stderr), "%v", args)
		assert.Contains(t, stderr.String(), "5 has no unit: add a unit, like 5s", "%v", args)
	}
	stdout.Reset()
	assert.Equal(t, exitOK, run([]string{"bench", "-window", "1d", "-keys", "10", "-duration", "5ms", "-reference=false"}, &stdout, &stderr), stderr.String())
	assert.Contains(t, stdout.String(), "limit 10 per 24h0m0s")

	for _, u := range []string{"ftp://x", "http://", "127.0.0.1:8080", "http://:8080/"} {
		stderr.Reset()
		assert.Equal(t, exitUsage, run([]string{"load", "-url", u}, &stdout, &stderr), u)
		assert.Contains(t, stderr.String(), fmt.Sprintf("-url %q: must be an http:// or https:// URL with a host", u))
	}
	for u, want := range map[string]string{
		"http://127.0.0.1:99999/":  `-url "http://127.0.0.1:99999/": port 99999 is out of range [1, 65535]`,
		"http://u:secret@[::1]:0/": `-url "http://u:xxxxx@[::1]:0/": port 0 is out of range [1, 65535]`,
	} {
		stderr.Reset()
		assert.Equal(t, exitUsage, run([]string{"load", "-url", u}, &stdout, &stderr), u)
		assert.Contains(t, stderr.String(), want, u)
		assert.NotContains(t, stderr.String(), "secret", u)
	}

	stderr.Reset()
	assert.Equal(t, exitOK, run([]string{"proxy", "-h"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-trusted-proxies")
}

// The load generator's comparison mode: every request through both proxies is answered 200, and
// a ratio comes out.
func TestLoadCompare(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"load", "-duration", "100ms", "-rounds", "1", "-concurrency", "2", "-clients", "50"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.Regexp(t, `(?m)^  proxy, no limiter +[0-9,]+ `, stdout.String())
	assert.Regexp(t, `(?m)^  proxy, limiter +[0-9,]+ `, stdout.String())
	assert.Regexp(t, `throughput with limiter / without: [0-9]+\.[0-9]{3}`, stdout.String())
}

func TestLoadURL(t *testing.T) {
	up := newUpstream(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"load", "-url", up.URL, "-duration", "500ms", "-concurrency", "2", "-clients", "0"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.Contains(t, stdout.String(), "map[200:")
	assert.Positive(t, up.hits.Load())
}

// A failed request's error names -url with its password hidden, as the report's heading does, and
// hides nothing else: a short password garbled the message ("cxxxxxnnect: cxxxxxnnectixxxxxn").
// net/http's own quote of the URL is the report's too: it hid the user part's password, but
// printed a password= option in clear.
func TestLoadErrorHidesThePassword(t *testing.T) {
	for _, pw := range []string{"s3cret-pw", "o", "api"} {
		for _, c := range []struct{ url, shown string }{
			{"http://u:" + pw + "@127.0.0.1:1/api/v1", "http://u:xxxxx@127.0.0.1:1/api/v1"},
			{"http://127.0.0.1:1/api/v1?password=" + pw, "http://127.0.0.1:1/api/v1?password=xxxxx"},
		} {
			var stdout, stderr bytes.Buffer
			code := run([]string{"load", "-url", c.url, "-duration", "200ms", "-concurrency", "1"}, &stdout, &stderr)
			assert.Equal(t, exitFail, code)
			assert.Contains(t, stderr.String(), "slidelimit load: load "+c.shown+": ", pw)
			assert.Contains(t, stderr.String(), `Get "`+c.shown+`"`, "no gap where the password is also a word of the URL: %s", pw)
			assert.Contains(t, stderr.String(), "connect: connection refused", pw)
			assert.NotContains(t, stderr.String(), ":"+pw+"@", pw)
			assert.NotContains(t, stderr.String(), "="+pw, pw)
		}
	}
}

// A redirect is the answer load measures: its status is reported, and the URL it points at is
// not asked (which made two round trips count as one request, reported as the other's status).
func TestLoadDoesNotFollowRedirects(t *testing.T) {
	var moved, target atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/d" {
			moved.Add(1)
			http.Redirect(w, r, "/d/", http.StatusMovedPermanently)
			return
		}
		target.Add(1)
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"load", "-url", srv.URL + "/d", "-duration", "500ms", "-concurrency", "2", "-clients", "0"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.Contains(t, stdout.String(), "map[301:")
	assert.Positive(t, moved.Load())
	assert.Zero(t, target.Load(), "the redirect was followed")
}

// -concurrency is bounded as bench's -workers is: a billion goroutines' latency buffers ran the
// process out of memory, exit 2 with a runtime dump instead of a usage error.
func TestLoadURLWithAnEmptyPort(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitUsage, run([]string{"load", "-url", "http://127.0.0.1:/"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `-url "http://127.0.0.1:/": the port after ':' is empty`)
}

func TestLoadConcurrencyBounded(t *testing.T) {
	for _, n := range []string{"0", "65537", "1000000000"} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, exitUsage, run([]string{"load", "-url", "http://127.0.0.1:1/", "-concurrency", n}, &stdout, &stderr), n)
		assert.Contains(t, stderr.String(), "-concurrency "+n+": must be in [1, 65536]")
	}
}

// Without -url, a -duration of a millisecond still warms the proxies up: the warm-up takes at
// least 100ms, where a quarter of -duration (250µs) failed every run, naming a -duration never given.
func TestLoadCompareShortDuration(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"load", "-duration", "1ms", "-rounds", "1", "-concurrency", "2", "-clients", "10"}, &stdout, &stderr)
	if code == exitOK {
		assert.Contains(t, stdout.String(), "throughput with limiter / without")
	} else {
		// A millisecond may still complete no request on a loaded machine, nor, rarely, the
		// 100ms warm-up; either way the error names what was asked, never a quarter of -duration.
		assert.NotContains(t, stderr.String(), "within 250µs", stderr.String())
		if strings.Contains(stderr.String(), "warming up") {
			assert.Contains(t, stderr.String(), "no request completed within 100ms")
		} else {
			assert.Contains(t, stderr.String(), "no request completed within 1ms")
		}
	}
}

// TestLoadSilentServer: against a server that accepts connections and never answers, a run ends
// at its -duration, not the client's 30 s timeout, and fails, since it measured nothing.
func TestLoadSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted and never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run([]string{"load", "-url", "http://" + ln.Addr().String() + "/", "-duration", "200ms", "-concurrency", "2"}, &stdout, &stderr)
	assert.Less(t, time.Since(start), 10*time.Second, "the run ends near its -duration")
	assert.Equal(t, exitFail, code, stdout.String())
	assert.Contains(t, stderr.String(), "no request completed within 200ms")
}

// TestBenchDurationAndBytesNote: a -duration too short to decide anything is refused; the bytes
// row names the keys it divides by when the sweeper has evicted some of the offered ones.
func TestBenchDurationAndBytesNote(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitUsage, run([]string{"bench", "-duration", "1ns"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-duration 1ns: must be at least 1ms")
	stderr.Reset()
	assert.Equal(t, exitUsage, run([]string{"load", "-duration", "999us"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-duration 999us: must be at least 1ms")

	var rows []string
	row := func(label, value, note string) { rows = append(rows, label+"|"+value+"|"+note) }
	benchResult{ops: 10, elapsed: time.Second, heap: 1000, heapKeys: 50}.print(row, 1, 1000)
	assert.Contains(t, rows, "bytes per key|20.0|heap growth after GC / the 50 keys tracked then, of 1,000 offered")
	rows = nil
	benchResult{ops: 10, elapsed: time.Second, heap: 1000, heapKeys: 50}.print(row, 1, 50)
	assert.Contains(t, rows, "bytes per key|20.0|heap growth after GC / keys, every key tracked")
	// A heap that did not grow says so: with few keys the noise can hide their share, and 0.0
	// bytes per key was printed as a figure.
	rows = nil
	benchResult{ops: 10, elapsed: time.Second, heap: 0, heapKeys: 100}.print(row, 1, 100)
	assert.Contains(t, rows, "bytes per key|-|heap growth after GC too small to measure with this few keys")
}

// A bool flag given its value after a space stops the flags there: the error says how to write it.
func TestBoolFlagValueAfterASpace(t *testing.T) {
	for _, args := range [][]string{{"-reference", "false"}, {"proxy", "-upstream", "http://127.0.0.1:1", "-shadow", "true"}} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, exitUsage, run(args, &stdout, &stderr), "%v", args)
		flag, value := args[len(args)-2], args[len(args)-1]
		assert.Contains(t, stderr.String(), fmt.Sprintf("unexpected argument %q: a bool flag takes its value after '=', like %s=%s\n", value, flag, value), "%v", args)
	}
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitUsage, run([]string{"-keys", "10", "extra"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "unexpected argument \"extra\"\n")
	// Where the bool flag was the value of the flag before it, no such hint.
	stderr.Reset()
	assert.Equal(t, exitUsage, run([]string{"proxy", "-upstream", "http://127.0.0.1:1", "-name", "-shadow", "true"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "unexpected argument \"true\"\n")
}

func TestClientAddr(t *testing.T) {
	assert.Equal(t, "100.64.0.0", clientAddr(0))
	assert.Equal(t, "100.64.1.2", clientAddr(258))
	assert.Equal(t, "100.65.0.1", clientAddr(1<<16+1))
}

func TestGroup(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		assert.Equal(t, want, group(n))
	}
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

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}), "an even count: the mean of the middle two")
	assert.Equal(t, 7.0, median([]float64{7}))
}

// TestIntegerFlagsAreDecimal: every int and int64 flag reads base 10 only, as -rate's count does:
// the flag package alone reads 010 as 8, 0x10 as 16 and 1_000 as 1000. -h still names them int.
func TestIntegerFlagsAreDecimal(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want int64
		err  string
	}{
		{"010", 10, ""},
		{"-3", -3, ""},
		{"+7", 7, ""},
		{"0x10", 0, "-n 0x10: not a whole number in decimal digits"},
		{"0o10", 0, "-n 0o10: not a whole number in decimal digits"},
		{"1_000", 0, "-n 1_000: not a whole number in decimal digits"},
		{"99999999999999999999", 0, "-n 99999999999999999999: out of range: beyond ±9223372036854775807, far past what the flag takes; write a smaller whole number\n"},
		{"-99999999999999999999", 0, "-n -99999999999999999999: out of range: beyond ±9223372036854775807, far past what the flag takes; write a smaller whole number\n"},
	} {
		for _, kind := range []string{"int", "int64"} {
			var errs strings.Builder
			fs := newFlagSet("t", "", &errs)
			var n int
			var n64 int64
			if kind == "int" {
				fs.IntVar(&n, "n", 1, "a number")
			} else {
				fs.Int64Var(&n64, "n", 1, "a number")
			}
			err := parseFlags(fs, []string{"-n", c.arg})
			got := int64(n) + n64
			if c.err == "" {
				if err != nil || got != c.want {
					t.Errorf("%s -n %s: %d, %v (%s); want %d", kind, c.arg, got, err, errs.String(), c.want)
				}
				continue
			}
			if !errors.Is(err, errUsage) || !strings.Contains(errs.String(), c.err) {
				t.Errorf("%s -n %s: %v, stderr %q; want a usage error saying %q", kind, c.arg, err, errs.String(), c.err)
			}
		}
	}
	var help strings.Builder
	fs := newFlagSet("t", "", &help)
	fs.Int64Var(new(int64), "n", 1, "a number")
	if err := parseFlags(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(help.String(), "-n int") {
		t.Fatalf("-h: %v, %q; want the flag named -n int", err, help.String())
	}
}

// A limiter's error is logged with copies of the Redis URL redacted and nothing else hidden: a
// password that is a word of Redis's reply ("WRONGPASS invalid username-password pair") was hidden
// there, which named it beside redisstore's ERROR line that prints the reply as it is.
func TestRedisErrTextHidesOnlyTheURL(t *testing.T) {
	raw := "redis://:pair@127.0.0.1:1/0"
	err := errors.New(`redisstore: redis unavailable: WRONGPASS invalid username-password pair or user is disabled.`)
	assert.Equal(t, err.Error(), redisErrText(err, raw))
	err = fmt.Errorf("dial %s: refused", raw)
	assert.Equal(t, "dial redis://:xxxxx@127.0.0.1:1/0: refused", redisErrText(err, raw))
	assert.Equal(t, err.Error(), redisErrText(err, ""))
}
