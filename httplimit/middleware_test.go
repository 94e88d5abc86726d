package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// w0 is the start of a one-minute window: 1_699_999_980_000 = 28_333_333 × 60_000.
const w0 = int64(1_699_999_980_000)

// newEngine returns a sliding-counter limiter on a manual clock reading startMs, and the clock.
func newEngine(t *testing.T, limit int64, window time.Duration, startMs int64) (*engine.Limiter, *clock.Clock) {
	t.Helper()
	clk := clock.NewManual(startMs)
	l, err := engine.New(policy.SlidingCounter{Limit: limit, Window: window}, engine.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, clk
}

func nowOf(clk *clock.Clock) func() time.Time {
	return func() time.Time { return time.UnixMilli(clk.Now()) }
}

// reply is what the tests look at in a response.
type reply struct {
	status     int
	policy     string
	rateLimit  string
	retryAfter string
	body       string
}

func get(t *testing.T, c *http.Client, url string, header map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return reply{
		status:     res.StatusCode,
		policy:     res.Header.Get("RateLimit-Policy"),
		rateLimit:  res.Header.Get("RateLimit"),
		retryAfter: res.Header.Get("Retry-After"),
		body:       string(body),
	}
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

// Exactly limit requests pass in a window, the rest get 429, and every field is what the sliding
// counter's rules give, worked out by hand in the comments.
func TestExactLimitAndFields(t *testing.T) {
	lim, clk := newEngine(t, 5, time.Minute, w0+15_500)
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk)}
	ts := serve(t, mw.Wrap(ok))
	c := ts.Client()

	// 44.5 s are left in the window: t = 45. Refused: wait to the edge + 1 ms = 44.501 s → 45.
	for i := range 5 {
		r := get(t, c, ts.URL, nil)
		assert.Equal(t, reply{200, `"default";q=5;w=60`, `"default";r=` + string(rune('4'-i)) + `;t=45`, "", "ok"}, r, "request %d", i+1)
	}
	for i := range 3 {
		r := get(t, c, ts.URL, nil)
		assert.Equal(t, reply{429, `"default";q=5;w=60`, `"default";r=0;t=45`, "45", "rate limit exceeded\n"}, r, "request %d", i+6)
	}

	clk.Advance(30 * time.Second) // 14.5 s left: t = 15; wait 14.501 s → 15.
	assert.Equal(t, reply{429, `"default";q=5;w=60`, `"default";r=0;t=15`, "15", "rate limit exceeded\n"}, get(t, c, ts.URL, nil))

	// 500 ms into the next window: the previous 5 carry floor(5 × 59.5/60) = 4, so one more
	// passes (estimate 5, r=0, t = ceil(59.5) = 60). The next one must wait until the carried
	// weight drops to 3: floor(60000 × 1/5) + 1 = 12001 ms into the window, 11.501 s → 12. On a
	// refusal t is the time until the quota is available again, the same 12 as Retry-After, not
	// the 60 s until the window ends.
	clk.Advance(15 * time.Second)
	assert.Equal(t, reply{200, `"default";q=5;w=60`, `"default";r=0;t=60`, "", "ok"}, get(t, c, ts.URL, nil))
	assert.Equal(t, reply{429, `"default";q=5;w=60`, `"default";r=0;t=12`, "12", "rate limit exceeded\n"}, get(t, c, ts.URL, nil))
}

// Concurrent clients on one key: exactly limit admitted, whatever the interleaving.
func TestExactLimitConcurrent(t *testing.T) {
	lim, clk := newEngine(t, 40, time.Minute, w0)
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk)}
	ts := serve(t, mw.Wrap(ok))
	c := ts.Client()

	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				res, err := c.Get(ts.URL)
				if !assert.NoError(t, err) {
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				mu.Lock()
				codes[res.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{200: 40, 429: 40}, codes)
}

func TestCost(t *testing.T) {
	lim, clk := newEngine(t, 5, time.Minute, w0)
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(lim), Now: nowOf(clk),
		Cost: func(*http.Request) int64 { return 2 },
	}
	ts := serve(t, mw.Wrap(ok))
	got := []int{}
	for range 3 {
		got = append(got, get(t, ts.Client(), ts.URL, nil).status)
	}
	assert.Equal(t, []int{200, 200, 429}, got)
}

// A peer that is not a trusted proxy cannot change its key with forged forwarding headers.
func TestSpoofedForwardedFromUntrustedPeer(t *testing.T) {
	for _, hdr := range []httplimit.ForwardedHeader{httplimit.XForwardedFor, httplimit.Forwarded} {
		t.Run(hdr.String(), func(t *testing.T) {
			lim, clk := newEngine(t, 3, time.Minute, w0)
			ip := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: hdr}
			var mu sync.Mutex
			keys := map[string]int{}
			mw := &httplimit.Middleware{
				Limiter: httplimit.Local(lim), Now: nowOf(clk), KeyFunc: ip.Key,
				OnDecision: func(_ *http.Request, key string, _ engine.Decision) {
					mu.Lock()
					keys[key]++
					mu.Unlock()
				},
			}
			ts := serve(t, mw.Wrap(ok))
			admitted := 0
			for i := range 6 {
				forged := "198.51.100." + string(rune('1'+i))
				r := get(t, ts.Client(), ts.URL, map[string]string{
					"X-Forwarded-For": forged + ", 10.0.0.1",
					"Forwarded":       "for=" + forged + ", for=10.0.0.1",
					"X-Real-IP":       forged,
				})
				if r.status == 200 {
					admitted++
				}
			}
			assert.Equal(t, 3, admitted)
			assert.Equal(t, map[string]int{"ip:127.0.0.1": 6}, keys)
		})
	}
}

// Behind trusted proxies, the first untrusted hop from the right is the client: distinct clients
// get distinct allowances, and a client cannot escape its own by prepending forged hops.
func TestTrustedProxyChain(t *testing.T) {
	lim, clk := newEngine(t, 2, time.Minute, w0)
	trusted, err := httplimit.ParsePrefixes("127.0.0.0/8, 10.0.0.0/8")
	require.NoError(t, err)
	ip := &httplimit.ClientIP{TrustedProxies: trusted}
	var mu sync.Mutex
	var keys []string
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(lim), Now: nowOf(clk), KeyFunc: ip.Key,
		OnDecision: func(_ *http.Request, key string, _ engine.Decision) {
			mu.Lock()
			keys = append(keys, key)
			mu.Unlock()
		},
	}
	ts := serve(t, mw.Wrap(ok))
	xff := func(v string) int {
		return get(t, ts.Client(), ts.URL, map[string]string{"X-Forwarded-For": v}).status
	}
	assert.Equal(t, 200, xff("203.0.113.7, 10.0.0.2"))
	assert.Equal(t, 200, xff("203.0.113.7, 10.1.2.3, 10.0.0.2"))
	assert.Equal(t, 429, xff("203.0.113.7, 10.0.0.2"))
	assert.Equal(t, 429, xff("198.51.100.1, 203.0.113.7, 10.0.0.2"), "a forged hop left of the client")
	assert.Equal(t, 200, xff("203.0.113.8, 10.0.0.2"), "another client behind the same proxy")
	assert.Equal(t, 200, xff(""), "the trusted proxy itself, with no header")
	assert.Equal(t, []string{
		"ip:203.0.113.7", "ip:203.0.113.7", "ip:203.0.113.7", "ip:203.0.113.7", "ip:203.0.113.8", "ip:127.0.0.1",
	}, keys)
}

func TestIPv6Grouping(t *testing.T) {
	for _, tc := range []struct {
		prefix int
		want   []int
	}{
		{64, []int{200, 200, 429, 200}},
		{0, []int{200, 200, 429, 200}}, // the default is /64
		{128, []int{200, 200, 200, 200}},
	} {
		lim, clk := newEngine(t, 2, time.Minute, w0)
		ip := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, IPv6Prefix: tc.prefix}
		mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk), KeyFunc: ip.Key}
		ts := serve(t, mw.Wrap(ok))
		var got []int
		for _, a := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", "[2001:db8:1:2::3]:4711", "2001:db8:1:3::1"} {
			got = append(got, get(t, ts.Client(), ts.URL, map[string]string{"X-Forwarded-For": a}).status)
		}
		assert.Equal(t, tc.want, got, "IPv6Prefix %d", tc.prefix)
	}
}

// Shadow mode decides and reports, but every request passes and the response is untouched.
func TestShadow(t *testing.T) {
	lim, clk := newEngine(t, 2, time.Minute, w0)
	var mu sync.Mutex
	var decided []bool
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(lim), Now: nowOf(clk), Shadow: true,
		OnDecision: func(_ *http.Request, _ string, d engine.Decision) {
			mu.Lock()
			decided = append(decided, d.Allowed)
			mu.Unlock()
		},
	}
	ts := serve(t, mw.Wrap(ok))
	for range 4 {
		assert.Equal(t, reply{status: 200, body: "ok"}, get(t, ts.Client(), ts.URL, nil))
	}
	assert.Equal(t, []bool{true, true, false, false}, decided)
}

// failing is a Limiter whose store is down; it decides d and returns err.
type failing struct {
	d   engine.Decision
	err error
}

func (f failing) Take(context.Context, string, int64) (engine.Decision, error) { return f.d, f.err }

func TestErrorModes(t *testing.T) {
	down := errors.New("store down")
	refusal := engine.Decision{Limit: 7, RetryAfter: 2500 * time.Millisecond, Reason: engine.ReasonLimited}
	for _, tc := range []struct {
		mode   httplimit.ErrorMode
		shadow bool
		want   reply
	}{
		{httplimit.FailOpen, false, reply{status: 200, policy: `"api";q=7;w=10`, body: "ok"}},
		{httplimit.FailClosed, false, reply{status: 503, retryAfter: "3", body: "rate limiter unavailable\n"}},
		// The fallback's refusal stands, with its wait; its figures are not the advertised
		// quota's, so RateLimit lists nothing for it.
		{httplimit.TrustDecision, false, reply{429, `"api";q=7;w=10`, "", "3", "rate limit exceeded\n"}},
		{httplimit.FailClosed, true, reply{status: 200, body: "ok"}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			var mu sync.Mutex
			var seen []error
			mw := &httplimit.Middleware{
				Limiter:   failing{refusal, down},
				Quota:     httplimit.Quota{Name: "api", Limit: 7, Window: 10 * time.Second},
				ErrorMode: tc.mode,
				Shadow:    tc.shadow,
				OnError: func(_ *http.Request, _ string, err error) {
					mu.Lock()
					seen = append(seen, err)
					mu.Unlock()
				},
			}
			ts := serve(t, mw.Wrap(ok))
			assert.Equal(t, tc.want, get(t, ts.Client(), ts.URL, nil))
			assert.Equal(t, []error{down}, seen)
		})
	}
}

// In Shadow mode a Limiter's error under FailLocal still has its fallback's Decision reported to
// OnDecision, as without Shadow, and the request is served; under FailOpen and FailClosed the
// limit is passed over, and nothing is reported.
func TestShadowReportsFailLocalsDecision(t *testing.T) {
	refusal := engine.Decision{Limit: 7, RetryAfter: 2500 * time.Millisecond, Reason: engine.ReasonLimited}
	for _, tc := range []struct {
		mode httplimit.ErrorMode
		want []engine.Decision
	}{
		{httplimit.FailLocal, []engine.Decision{refusal}},
		{httplimit.FailOpen, nil},
		{httplimit.FailClosed, nil},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			var mu sync.Mutex
			var got []engine.Decision
			mw := &httplimit.Middleware{
				Limiter:   failing{refusal, errors.New("store down")},
				ErrorMode: tc.mode,
				Shadow:    true,
				OnError:   func(*http.Request, string, error) {},
				OnDecision: func(_ *http.Request, _ string, d engine.Decision) {
					mu.Lock()
					got = append(got, d)
					mu.Unlock()
				},
			}
			ts := serve(t, mw.Wrap(ok))
			assert.Equal(t, reply{status: 200, body: "ok"}, get(t, ts.Client(), ts.URL, nil))
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, tc.want, got)
		})
	}
}

// Under FailLocal a fallback's admission is served, and the limit keeps its RateLimit-Policy
// item but has no RateLimit item: the fallback's Remaining (a share of the limit, one process's
// count) says nothing of the advertised quota. A healthy limit beside it is listed as always.
func TestFailLocalListsNoFallbackFigures(t *testing.T) {
	clk := clock.NewManual(w0)
	healthy, err := engine.New(policy.FixedWindow{Limit: 5, Window: time.Minute}, engine.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { healthy.Close() })
	share := engine.Decision{Allowed: true, Limit: 7, Remaining: 2, ResetAt: time.UnixMilli(w0 + 4000), Reason: engine.ReasonOK}
	mw := &httplimit.Middleware{
		Limiter:   failing{share, errors.New("store down")},
		Quota:     httplimit.Quota{Name: "fleet", Limit: 7, Window: 10 * time.Second},
		Limits:    []httplimit.Limit{{Limiter: httplimit.Local(healthy), Quota: httplimit.Quota{Name: "here"}}},
		ErrorMode: httplimit.FailLocal,
		Now:       nowOf(clk),
	}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, reply{200, `"fleet";q=7;w=10, "here";q=5;w=60`, `"here";r=4;t=60`, "", "ok"}, get(t, ts.Client(), ts.URL, nil))
}

func TestClosedLocalLimiterFailsOpen(t *testing.T) {
	clk := clock.NewManual(w0)
	lim, err := engine.New(policy.SlidingCounter{Limit: 1, Window: time.Minute}, engine.WithClock(clk))
	require.NoError(t, err)
	require.NoError(t, lim.Close())
	var got error
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), OnError: func(_ *http.Request, _ string, err error) { got = err }}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)
	assert.ErrorIs(t, got, httplimit.ErrLimiterClosed)
}

func TestOnLimitedAndQuotaOverride(t *testing.T) {
	lim, clk := newEngine(t, 1, 1500*time.Millisecond, w0)
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(lim), Now: nowOf(clk),
		Quota: httplimit.Quota{Name: `per "ip"`, Limit: 1, Window: 1500 * time.Millisecond},
		OnLimited: func(w http.ResponseWriter, _ *http.Request, d engine.Decision) {
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, d.Reason.String())
		},
	}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)
	// w0 is a multiple of 1500 ms too (1_699_999_980_000 = 1_133_333_320 × 1500): 1.5 s left.
	assert.Equal(t, reply{418, `"per \"ip\"";q=1;w=2`, `"per \"ip\"";r=0;t=2`, "2", "limited"}, get(t, ts.Client(), ts.URL, nil))
}

// Without a Quota and with a Limiter that reports no policy, RateLimit-Policy is left out.
func TestNoPolicyField(t *testing.T) {
	mw := &httplimit.Middleware{Limiter: failing{d: engine.Decision{Allowed: true, Limit: 3, Remaining: 2}}}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, reply{status: 200, rateLimit: `"default";r=2`, body: "ok"}, get(t, ts.Client(), ts.URL, nil))
}

func TestValidate(t *testing.T) {
	lim := failing{}
	for _, tc := range []struct {
		m    httplimit.Middleware
		want string
	}{
		{httplimit.Middleware{}, "Middleware.Limiter is nil"},
		{httplimit.Middleware{Limiter: lim, Quota: httplimit.Quota{Name: "a\nb"}}, `Middleware.Quota.Name = "a\nb"`},
		{httplimit.Middleware{Limiter: lim, Quota: httplimit.Quota{Limit: -1}}, "Limit: -1"},
		{httplimit.Middleware{Limiter: lim, ErrorMode: 9}, "Middleware.ErrorMode = 9"},
		{httplimit.Middleware{Limiter: httplimit.Local(nil)}, "Middleware.Limiter is nil (httplimit.Local(nil) is nil"},
		{httplimit.Middleware{Limiter: lim, Limits: []httplimit.Limit{{Quota: httplimit.Quota{Name: "b"}}}}, "Middleware.Limits[0].Limiter is nil"},
		{httplimit.Middleware{Limiter: lim, Limits: []httplimit.Limit{{Limiter: lim}}}, "Middleware.Limits[0].Quota.Name is empty"},
		{httplimit.Middleware{Limiter: lim, Limits: []httplimit.Limit{{Limiter: lim, Quota: httplimit.Quota{Name: "default"}}}}, `Middleware.Limits[0].Quota.Name = "default": Middleware.Quota has the same name`},
		{httplimit.Middleware{Limiter: lim, MaxDelay: -time.Second}, "Middleware.MaxDelay = -1s"},
		{httplimit.Middleware{Limiter: lim, MaxDelay: time.Second, MaxWaiting: -1}, "Middleware.MaxWaiting = -1"},
		{httplimit.Middleware{Limiter: lim, Quota: httplimit.Quota{Limit: 1e15}}, "Middleware.Quota.Limit = 1000000000000000: above 999999999999999, the largest integer a structured field can carry"},
	} {
		err := tc.m.Validate()
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), tc.want)
		}
		// Wrap does not panic: every request gets 500, and OnError hears why.
		var seen error
		tc.m.OnError = func(_ *http.Request, _ string, err error) { seen = err }
		ts := serve(t, tc.m.Wrap(ok))
		assert.Equal(t, reply{status: 500, body: "rate limiter misconfigured\n"}, get(t, ts.Client(), ts.URL, nil))
		assert.Equal(t, err, seen)
	}
	assert.NoError(t, (&httplimit.Middleware{Limiter: lim}).Validate())
}

// The largest quota a structured field can carry is accepted.
func TestValidateLargestQuota(t *testing.T) {
	assert.NoError(t, (&httplimit.Middleware{Limiter: failing{}, Quota: httplimit.Quota{Limit: 999_999_999_999_999}}).Validate())
}

// Wrap(nil) answers 500 and charges nothing: it panicked on every admitted request, after its
// unit was counted.
func TestWrapNilHandler(t *testing.T) {
	l, err := engine.New(policy.SlidingCounter{Limit: 1, Window: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var seen error
	m := &httplimit.Middleware{Limiter: httplimit.Local(l), OnError: func(_ *http.Request, _ string, err error) { seen = err }}
	require.NoError(t, m.Validate())
	ts := serve(t, m.Wrap(nil))
	assert.Equal(t, reply{status: 500, body: "rate limiter misconfigured\n"}, get(t, ts.Client(), ts.URL, nil))
	require.Error(t, seen)
	assert.Contains(t, seen.Error(), "Middleware.Wrap(nil)")
	assert.Zero(t, l.Len(), "no key was charged")

	// With Problem, as the middleware's other own errors: a problem of type about:blank.
	m.Problem = true
	ts = serve(t, m.Wrap(nil))
	res, err := ts.Client().Get(ts.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, 500, res.StatusCode)
	assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	assert.Contains(t, string(body), `"detail":"rate limiter misconfigured"`)
}

// A Remaining past what a structured field can carry is sent as the largest it can: a longer
// integer makes the whole RateLimit field invalid.
func TestRemainingCappedInTheField(t *testing.T) {
	huge := failing{d: engine.Decision{Allowed: true, Limit: math.MaxInt64, Remaining: math.MaxInt64}}
	ts := serve(t, (&httplimit.Middleware{Limiter: huge, Quota: httplimit.Quota{Name: "q", Limit: 5}}).Wrap(ok))
	r := get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, 200, r.status)
	assert.Equal(t, `"q";r=999999999999999`, r.rateLimit)
}

func TestQuotaOf(t *testing.T) {
	for _, tc := range []struct {
		p    policy.Policy
		want httplimit.Quota
	}{
		{policy.SlidingCounter{Limit: 100, Window: time.Minute}, httplimit.Quota{"n", 100, time.Minute}},
		{policy.FixedWindow{Limit: 3, Window: time.Second}, httplimit.Quota{"n", 3, time.Second}},
		{policy.SlidingLog{Limit: 9, Window: time.Hour}, httplimit.Quota{"n", 9, time.Hour}},
		{policy.TokenBucket{Rate: 10, Burst: 25}, httplimit.Quota{"n", 25, 2500 * time.Millisecond}},
		{policy.GCRA{Rate: 3, Burst: 10}, httplimit.Quota{"n", 10, 3334 * time.Millisecond}},
		{policy.LeakyBucket{Rate: 4, Capacity: 8}, httplimit.Quota{"n", 8, 2 * time.Second}},
		{policy.DualBucket{RequestsPerMin: 60, TokensPerMin: 1000}, httplimit.Quota{"n", 1000, time.Minute}},
	} {
		assert.Equal(t, tc.want, httplimit.QuotaOf("n", tc.p), "%T", tc.p)
	}
}

// TestRemainingNeverAboveQuota: for every policy, the RateLimit field's r is in the unit of the
// RateLimit-Policy field's q and never above it, from a fresh key through its first refusal.
func TestRemainingNeverAboveQuota(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingCounter{Limit: 5, Window: time.Minute},
		policy.FixedWindow{Limit: 5, Window: time.Minute},
		policy.SlidingLog{Limit: 5, Window: time.Minute},
		policy.TokenBucket{Rate: 1, Burst: 5},
		policy.GCRA{Rate: 1, Burst: 5},
		policy.LeakyBucket{Rate: 1, Capacity: 5},
		policy.DualBucket{RequestsPerMin: 3, TokensPerMin: 1000},
		policy.DualBucket{RequestsPerMin: 1000, TokensPerMin: 3},
	} {
		clk := clock.NewManual(w0)
		lim, err := engine.New(p, engine.WithClock(clk))
		require.NoError(t, err)
		ts := serve(t, (&httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk)}).Wrap(ok))
		refused := false
		for i := 0; i < 2000 && !refused; i++ {
			r := get(t, ts.Client(), ts.URL, nil)
			var q, rem int64
			_, err := fmt.Sscanf(r.policy, `"default";q=%d;`, &q)
			require.NoError(t, err, "%T: RateLimit-Policy %q", p, r.policy)
			_, err = fmt.Sscanf(r.rateLimit, `"default";r=%d;`, &rem)
			require.NoError(t, err, "%T: RateLimit %q", p, r.rateLimit)
			require.LessOrEqual(t, rem, q, "%+v, request %d: r above q", p, i+1)
			refused = r.status == http.StatusTooManyRequests
		}
		assert.True(t, refused, "%+v: no refusal within 2000 requests", p)
		lim.Close()
	}
}

func TestKeyByHeaderAndPath(t *testing.T) {
	byKey := httplimit.KeyByHeader("x-api-key", nil)
	r := httptest.NewRequest(http.MethodGet, "/search?q=1", nil)
	r.RemoteAddr = "192.0.2.1:5555"
	assert.Equal(t, "ip:192.0.2.1", byKey(r))
	r.Header.Set("X-Api-Key", "k1")
	assert.Equal(t, "h:k1", byKey(r))
	assert.Equal(t, "path:/search ip:192.0.2.1", httplimit.KeyByPathAndIP(nil)(r))
	assert.Equal(t, "path:/search h:k1", httplimit.KeyByPathAndIP(byKey)(r))
	assert.Equal(t, "conn:192.0.2.1:5555", httplimit.KeyByConn(r), "without ConnContext")

	// Host is in Request.Host: Go's server takes it out of the header map.
	byHost := httplimit.KeyByHeader("host", nil)
	assert.Equal(t, "h:example.com", byHost(r), "httptest.NewRequest's host")
	r.Host = ""
	assert.Equal(t, "ip:192.0.2.1", byHost(r), "no host: the fallback")
}

// Each connection is its own key when the server tags connections with ConnContext.
func TestPerConnectionLimit(t *testing.T) {
	lim, clk := newEngine(t, 2, time.Minute, w0)
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk), KeyFunc: httplimit.KeyByConn}
	ts := httptest.NewUnstartedServer(mw.Wrap(ok))
	ts.Config.ConnContext = httplimit.ConnContext
	ts.Start()
	t.Cleanup(ts.Close)

	run := func() []int {
		tr := &http.Transport{MaxConnsPerHost: 1}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		var got []int
		for range 3 {
			got = append(got, get(t, c, ts.URL, nil).status)
		}
		return got
	}
	assert.Equal(t, []int{200, 200, 429}, run())
	assert.Equal(t, []int{200, 200, 429}, run(), "a new connection starts afresh")
}

func TestRateLimitFieldNeverNegative(t *testing.T) {
	// A reset time already past (a store whose clock runs ahead of ours) gives t=0, not t=-1.
	past := time.UnixMilli(w0 - 1500)
	mw := &httplimit.Middleware{
		Limiter: failing{d: engine.Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAt: past}},
		Now:     func() time.Time { return time.UnixMilli(w0) },
	}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, `"default";r=1;t=0`, get(t, ts.Client(), ts.URL, nil).rateLimit)
	assert.False(t, strings.Contains(get(t, ts.Client(), ts.URL, nil).rateLimit, "-"))
}

// admitsAll is a Limiter that admits every request, whatever its cost, and counts its calls.
type admitsAll struct{ calls *atomic.Int64 }

func (a admitsAll) Take(context.Context, string, int64) (engine.Decision, error) {
	a.calls.Add(1)
	return engine.Decision{Allowed: true, Limit: 5, Remaining: 5, Reason: engine.ReasonOK}, nil
}

// A negative cost is the caller's bug: 500 in every error mode, even when the limiter is closed
// or failing or would admit it, and no Limiter is asked (one might take it as units to give
// back); the limiter's error is not reported as a store failure.
func TestNegativeCostRefusedInEveryErrorMode(t *testing.T) {
	closedLim, err := engine.New(policy.SlidingCounter{Limit: 5, Window: time.Second})
	require.NoError(t, err)
	require.NoError(t, closedLim.Close())
	var calls atomic.Int64
	for name, lim := range map[string]httplimit.Limiter{
		"closed":     httplimit.Local(closedLim),
		"failing":    failing{engine.Decision{Limit: 5, Reason: engine.ReasonLimited}, errors.New("store down")},
		"admits all": admitsAll{&calls},
	} {
		for _, mode := range []httplimit.ErrorMode{httplimit.FailOpen, httplimit.FailClosed, httplimit.FailLocal} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				var errs int
				mw := &httplimit.Middleware{
					Limiter: lim, ErrorMode: mode,
					Cost:    func(*http.Request) int64 { return -1 },
					OnError: func(*http.Request, string, error) { errs++ },
				}
				ts := serve(t, mw.Wrap(ok))
				got := get(t, ts.Client(), ts.URL, nil)
				assert.Equal(t, http.StatusInternalServerError, got.status)
				assert.Equal(t, "rate limiter: negative cost\n", got.body)
				assert.Zero(t, errs, "not a limiter failure")
			})
		}
	}
	assert.Zero(t, calls.Load(), "a Limiter was asked for a negative cost")
}

// A handler that fans a request out, serving several requests under its context through an
// inner middleware at once, is safe (run under -race): the outer middleware's decisions are read
// and given back under a lock. The first refusal below gives the outer unit back, once.
func TestFanOutThroughAStack(t *testing.T) {
	clk := clock.NewManual(w0)
	outer, err := engine.New(policy.SlidingCounter{Limit: 100, Window: time.Minute}, engine.WithClock(clk))
	require.NoError(t, err)
	defer outer.Close()
	inner, err := engine.New(policy.SlidingCounter{Limit: 1, Window: time.Minute}, engine.WithClock(clk))
	require.NoError(t, err)
	defer inner.Close()
	in := (&httplimit.Middleware{Limiter: httplimit.Local(inner), Quota: httplimit.Quota{Name: "in"}, Now: nowOf(clk)}).Wrap(ok)
	var codes sync.Map
	fan := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := httptest.NewRecorder()
				in.ServeHTTP(rec, r.Clone(r.Context()))
				codes.Store(i, rec.Code)
			}()
		}
		wg.Wait()
		io.WriteString(w, "done")
	})
	mw := &httplimit.Middleware{Limiter: httplimit.Local(outer), Quota: httplimit.Quota{Name: "out"}, Now: nowOf(clk)}
	ts := serve(t, mw.Wrap(fan))
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)
	admitted := 0
	codes.Range(func(_, v any) bool {
		if v.(int) == 200 {
			admitted++
		}
		return true
	})
	assert.Equal(t, 1, admitted, "the inner limit of 1 admits one of the eight")
	assert.Equal(t, int64(100), outer.Peek("ip:127.0.0.1").Remaining, "the outer unit given back once, by the first refusal")
}

// Under FailLocal a closed limiter's Decision is trusted: the answer is 503 with Retry-After,
// as for a limiter that cannot decide, not 429 as if the client were over its limit.
func TestFailLocalClosedLimiterIsUnavailable(t *testing.T) {
	lim, err := engine.New(policy.SlidingCounter{Limit: 5, Window: time.Second})
	require.NoError(t, err)
	require.NoError(t, lim.Close())
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), ErrorMode: httplimit.FailLocal}
	ts := serve(t, mw.Wrap(ok))
	got := get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, http.StatusServiceUnavailable, got.status)
	assert.Equal(t, "1", got.retryAfter)
	assert.Equal(t, "rate limiter unavailable\n", got.body)
	assert.Empty(t, got.rateLimit, "no quota is reported spent")
	assert.Empty(t, got.policy)
}

// A refusal made without judging the key's quota (the key cap, a negative cost, a cost above the
// limit for a new key at the cap) lists no RateLimit item for the refusing limit: r=0 would tell
// the client its quota is spent. A limit not asked is still listed as it stands.
func TestRefusalWithoutQuotaListsNoRemaining(t *testing.T) {
	capped, err := engine.New(policy.SlidingCounter{Limit: 5, Window: time.Minute}, engine.WithMaxKeys(1), engine.WithShards(1))
	require.NoError(t, err)
	t.Cleanup(func() { capped.Close() })
	hour, err := engine.New(policy.SlidingCounter{Limit: 100, Window: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { hour.Close() })
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(capped),
		Limits:  []httplimit.Limit{{Limiter: httplimit.Local(hour), Quota: httplimit.Quota{Name: "hour"}}},
		KeyFunc: httplimit.KeyByHeader("X-Key", nil),
		Cost: func(r *http.Request) int64 {
			if c, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64); err == nil {
				return c
			}
			return 1
		},
	}
	ts := serve(t, mw.Wrap(ok))
	first := get(t, ts.Client(), ts.URL, map[string]string{"X-Key": "a"})
	require.Equal(t, 200, first.status)
	require.Contains(t, first.rateLimit, `"default";r=4`)

	got := get(t, ts.Client(), ts.URL, map[string]string{"X-Key": "b"})
	assert.Equal(t, http.StatusServiceUnavailable, got.status)
	assert.Equal(t, "1", got.retryAfter)
	assert.NotContains(t, got.rateLimit, `"default"`, "the capped limit knows nothing of b's quota")

	got = get(t, ts.Client(), ts.URL, map[string]string{"X-Key": "a", "X-Cost": "-1"})
	assert.Equal(t, http.StatusInternalServerError, got.status)
	assert.NotContains(t, got.rateLimit, `"default"`)
	assert.Contains(t, got.rateLimit, `"hour";r=99`, "the limit not asked is listed as it stands")

	got = get(t, ts.Client(), ts.URL, map[string]string{"X-Key": "c", "X-Cost": "6"})
	assert.Equal(t, http.StatusTooManyRequests, got.status, "a cost above the limit, refused at the cap before c is read")
	assert.NotContains(t, got.rateLimit, `"default"`, "c's quota was not read")

	// A cost the policy refuses before it reads the key: GCRA's above Burst.
	gcra, err := engine.New(policy.GCRA{Rate: 1, Burst: 5})
	require.NoError(t, err)
	t.Cleanup(func() { gcra.Close() })
	mw = &httplimit.Middleware{Limiter: httplimit.Local(gcra), Cost: func(*http.Request) int64 { return 6 }}
	ts = serve(t, mw.Wrap(ok))
	got = get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, http.StatusTooManyRequests, got.status)
	assert.NotContains(t, got.rateLimit, `"default"`, "GCRA refused the cost without reading the key")
	assert.Contains(t, got.policy, `"default";q=5`, "the limit itself is still named")
}

// WriteProblem writes the about:blank problem the middleware writes for its own errors.
func TestWriteProblem(t *testing.T) {
	rec := httptest.NewRecorder()
	httplimit.WriteProblem(rec, http.StatusBadGateway, "the upstream failed")
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	assert.JSONEq(t, `{"type":"about:blank","title":"Bad Gateway","status":502,"detail":"the upstream failed"}`, rec.Body.String())
}

// refundFails is a Limiter backed by an engine whose store fails to give units back: its Refund
// returns an error and gives nothing.
type refundFails struct {
	slidelimit.Limiter
	refunds atomic.Int64
}

func (l *refundFails) Refund(context.Context, string, int64, engine.Decision) (int64, error) {
	l.refunds.Add(1)
	return 0, errors.New("refund: store unavailable")
}

// A Limiter's failure to give back what a request refused by another limit counted reaches
// OnError, as its failures to decide do: its units stay counted, and the operator is told. The
// request is answered as it would have been.
func TestRefundErrorReachesOnError(t *testing.T) {
	store, _ := newEngine(t, 10, time.Minute, w0)
	rf := &refundFails{Limiter: store.AsLimiter()}
	fw, _ := newEngine(t, 1, time.Hour, w0)
	var mu sync.Mutex
	var seen []string
	mw := &httplimit.Middleware{
		Limiter: rf, Quota: httplimit.Quota{Name: "store", Limit: 10},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(fw), Quota: httplimit.Quota{Name: "fw"}}},
		OnError: func(_ *http.Request, key string, err error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, key+": "+err.Error())
		},
	}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)
	assert.Equal(t, 429, get(t, ts.Client(), ts.URL, nil).status, "the second is refused by fw, and store is asked to give back")
	assert.Equal(t, int64(1), rf.refunds.Load())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"ip:127.0.0.1: refund: store unavailable"}, seen)
}

// A cost above one limit's quota is refused for its cost, with no Retry-After, in whichever
// order the limits are listed, also when a limit listed before it is used up and would give a
// wait: no wait admits the request. It counts nothing.
func TestCostAboveALaterLimitGetsNoWait(t *testing.T) {
	a, _ := newEngine(t, 5, 10*time.Second, w0)
	b, _ := newEngine(t, 2, 10*time.Second, w0)
	require.True(t, a.Take("ip:127.0.0.1", 5).Allowed) // a used up
	three := func(*http.Request) int64 { return 3 }
	for _, order := range [][2]*engine.Limiter{{a, b}, {b, a}} {
		mw := &httplimit.Middleware{
			Limiter: httplimit.Local(order[0]), Quota: httplimit.Quota{Name: "first"},
			Limits: []httplimit.Limit{{Limiter: httplimit.Local(order[1]), Quota: httplimit.Quota{Name: "second"}}},
			Cost:   three,
		}
		ts := serve(t, mw.Wrap(ok))
		r := get(t, ts.Client(), ts.URL, nil)
		assert.Equal(t, 429, r.status)
		assert.Empty(t, r.retryAfter, "no wait admits a cost of 3 under a limit of 2")
	}
	assert.Equal(t, int64(2), b.Peek("ip:127.0.0.1").Remaining, "b counted nothing")
}

// A used-up limit not asked (an earlier one refused) shows in RateLimit its wait for a unit as t,
// as a refusing limit's t is its wait, not when it is full again: a token bucket of burst 10
// refilling one a second, emptied, says t=1, not t=10.
func TestUnaskedUsedUpLimitShowsItsWait(t *testing.T) {
	clk := clock.NewManual(w0)
	mk := func(p policy.Policy) *engine.Limiter { return newOn(t, p, clk) }
	first := mk(policy.SlidingCounter{Limit: 1, Window: time.Minute})
	bucket := mk(policy.TokenBucket{Rate: 1, Burst: 10})
	require.True(t, first.Allow("ip:127.0.0.1"))
	require.True(t, bucket.AllowN("ip:127.0.0.1", 10))
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(first), Quota: httplimit.Quota{Name: "minute"},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(bucket), Quota: httplimit.Quota{Name: "bucket"}}},
		Now:    nowOf(clk),
	}
	ts := serve(t, mw.Wrap(ok))
	r := get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, 429, r.status)
	// The minute's unit comes back 1 ms past the window's edge (60.001 s, rounded up).
	assert.Equal(t, `"minute";r=0;t=61, "bucket";r=0;t=1`, r.rateLimit)
	assert.Equal(t, "61", r.retryAfter)
}

// takeOnly is a Limiter with no Refund and no policy to report: one that cannot give units back.
type takeOnly struct{ l *engine.Limiter }

func (o takeOnly) Take(_ context.Context, key string, n int64) (engine.Decision, error) {
	return o.l.Take(key, n), nil
}

// A limit that cannot give back is asked last even when the request's cost is above the quota it
// advertises (it may admit more, as a tier does): asked first, it admitted, and the request that
// a later limit refused stayed counted in it.
func TestLimitThatCannotGiveBackIsNotAskedFirstForItsQuota(t *testing.T) {
	tier, _ := newEngine(t, 10, time.Minute, w0)
	used, _ := newEngine(t, 5, 10*time.Second, w0)
	require.True(t, used.Take("ip:127.0.0.1", 5).Allowed)
	mw := &httplimit.Middleware{
		Limiter: takeOnly{tier}, Quota: httplimit.Quota{Name: "tier", Limit: 2},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(used), Quota: httplimit.Quota{Name: "used"}}},
		Cost:   func(*http.Request) int64 { return 3 },
	}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, 429, get(t, ts.Client(), ts.URL, nil).status)
	assert.Equal(t, int64(10), tier.Peek("ip:127.0.0.1").Remaining, "the refused request took nothing from the tier")
}

// A cost above a sliding log's own limit (a limit that cannot give back, whose quota is its
// policy's) is refused by it, for the cost and with no Retry-After, though a used-up limit that
// can give back is listed after it and would have given a wait.
func TestCostAboveASlidingLogGetsNoWait(t *testing.T) {
	clk := clock.NewManual(w0)
	log, err := engine.New(policy.SlidingLog{Limit: 2, Window: 10 * time.Second}, engine.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { log.Close() })
	used, _ := newEngine(t, 5, 10*time.Second, w0)
	require.True(t, used.Take("ip:127.0.0.1", 5).Allowed)
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(log), Quota: httplimit.Quota{Name: "log"},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(used), Quota: httplimit.Quota{Name: "counter"}}},
		Cost:   func(*http.Request) int64 { return 3 },
		Now:    nowOf(clk),
	}
	ts := serve(t, mw.Wrap(ok))
	r := get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, 429, r.status)
	assert.Empty(t, r.retryAfter, "no wait admits a cost of 3 under a limit of 2")
}

// Under MaxDelay, a request that a limit which cannot give back has counted (the first of two
// sliding logs, asked in order) is refused at once rather than wait: decided again after the
// wait, it would be counted there a second time, though nothing is counted while a request waits.
func TestMaxDelayDoesNotCountALimitTwice(t *testing.T) {
	mk := func(p policy.Policy) *engine.Limiter { return newOn(t, p, nil) }
	a := mk(policy.SlidingLog{Limit: 100, Window: time.Hour})
	b := mk(policy.SlidingLog{Limit: 1, Window: 200 * time.Millisecond})
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(a), Quota: httplimit.Quota{Name: "hour"},
		Limits:   []httplimit.Limit{{Limiter: httplimit.Local(b), Quota: httplimit.Quota{Name: "burst"}}},
		MaxDelay: 5 * time.Second,
	}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)
	r := get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, 429, r.status, "refused at once: waiting would count the hour a second time")
	assert.NotEmpty(t, r.retryAfter)
	assert.Equal(t, int64(98), a.Peek("ip:127.0.0.1").Remaining, "the hour counted each request once")
}

// A nil *Middleware or *Listener is a configuration error, not a panic: Wrap answers 500 and
// Accept returns the error; a nil *ClientIP keys as the zero one.
func TestNilReceivers(t *testing.T) {
	var mw *httplimit.Middleware
	assert.ErrorIs(t, mw.Validate(), httplimit.ErrNoLimiter)
	w := httptest.NewRecorder()
	mw.Wrap(ok).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, http.StatusInternalServerError, w.Code)

	var ln *httplimit.Listener
	_, err := ln.Accept()
	assert.ErrorContains(t, err, "the *Listener is nil")
	assert.NoError(t, ln.Close())
	assert.NotNil(t, ln.Addr())

	var ip *httplimit.ClientIP
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "[2001:db8::1]:1234"
	req.Header.Set("X-Forwarded-For", "192.0.2.1")
	assert.Equal(t, "ip:2001:db8::/64", ip.Key(req))
}

// A cost above several limits' quotas is asked first of those whose own quota it is above,
// smallest first, then of those with a quota set by hand: a tier whose hand-set quota the cost is
// above, whether its Limiter admits the cost or, used up, would give a wait, does not hide a limit
// that refuses the cost outright behind a used-up one whose wait admits nothing.
func TestCostAboveQuotaPastATierGetsNoWait(t *testing.T) {
	for _, tierUsedUp := range []bool{false, true} {
		t.Run(fmt.Sprintf("tier used up=%v", tierUsedUp), func(t *testing.T) {
			clk := clock.NewManual(w0)
			tier := newOn(t, policy.SlidingCounter{Limit: 100, Window: time.Minute}, clk)
			used := newOn(t, policy.SlidingCounter{Limit: 20, Window: time.Minute}, clk)
			small := newOn(t, policy.FixedWindow{Limit: 5, Window: time.Minute}, clk)
			require.True(t, used.AllowN("ip:127.0.0.1", 20))
			tierLeft := int64(100)
			if tierUsedUp {
				require.True(t, tier.AllowN("ip:127.0.0.1", 100))
				tierLeft = 0
			}
			mw := &httplimit.Middleware{
				Limiter: httplimit.Local(tier), Quota: httplimit.Quota{Name: "tier", Limit: 3, Window: time.Minute},
				Limits: []httplimit.Limit{
					{Limiter: httplimit.Local(used), Quota: httplimit.Quota{Name: "used"}},
					{Limiter: httplimit.Local(small), Quota: httplimit.Quota{Name: "small"}},
				},
				Cost: func(*http.Request) int64 { return 10 },
				Now:  nowOf(clk),
			}
			ts := serve(t, mw.Wrap(ok))
			r := get(t, ts.Client(), ts.URL, nil)
			assert.Equal(t, 429, r.status)
			assert.Empty(t, r.retryAfter, "no wait admits a cost of 10 under a limit of 5")
			assert.Contains(t, r.body, "request cost exceeds the limit")
			assert.Equal(t, tierLeft, tier.Peek("ip:127.0.0.1").Remaining, "what the tier counted was given back")
			assert.Equal(t, int64(5), small.Peek("ip:127.0.0.1").Remaining)
		})
	}
}

// failingRefund decides on an engine and fails every Refund, as a store that went away between
// the two calls does.
type failingRefund struct{ l *engine.Limiter }

func (f failingRefund) Take(_ context.Context, key string, n int64) (engine.Decision, error) {
	return f.l.Take(key, n), nil
}

func (f failingRefund) Refund(context.Context, string, int64, engine.Decision) (int64, error) {
	return 0, errors.New("store unavailable")
}

// Under MaxDelay a request that a limit counted and then failed to give back is refused at once:
// decided again after the wait, it would be counted there twice.
func TestMaxDelayAfterAFailedRefundDoesNotWait(t *testing.T) {
	mk := func(p policy.Policy) *engine.Limiter { return newOn(t, p, nil) }
	hour := mk(policy.SlidingCounter{Limit: 100, Window: time.Hour})
	burst := mk(policy.GCRA{Rate: 10, Burst: 1})
	mw := &httplimit.Middleware{
		Limiter: failingRefund{hour}, Quota: httplimit.Quota{Name: "hour"},
		Limits:   []httplimit.Limit{{Limiter: httplimit.Local(burst), Quota: httplimit.Quota{Name: "burst"}}},
		MaxDelay: 2 * time.Second,
		OnError:  func(*http.Request, string, error) {},
	}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)
	r := get(t, ts.Client(), ts.URL, nil)
	assert.Equal(t, 429, r.status, "refused at once: waiting would count the hour a second time")
	assert.Equal(t, int64(98), hour.Peek("ip:127.0.0.1").Remaining, "the hour counted each request once")
}
