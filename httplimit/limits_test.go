package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/policy"
)

// newOn returns a limiter of p on clk (nil: on the engine's own clock), closed when the test ends.
func newOn(t *testing.T, p policy.Policy, clk *clock.Clock, opts ...engine.Option) *engine.Limiter {
	t.Helper()
	if clk != nil { // nil: the engine's own clock, for waits in real time
		opts = append([]engine.Option{engine.WithClock(clk)}, opts...)
	}
	l, err := engine.New(p, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// Two limits on one middleware: 3 per second and 5 per minute. A request the per-second limit
// refuses consumes nothing of the per-minute one, and both are listed in both fields.
func TestSeveralLimitsAllOrNothing(t *testing.T) {
	clk := clock.NewManual(w0)
	perSec := newOn(t, policy.FixedWindow{Limit: 3, Window: time.Second}, clk)
	perMin := newOn(t, policy.FixedWindow{Limit: 5, Window: time.Minute}, clk)
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(perMin), Quota: httplimit.Quota{Name: "minute"},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(perSec), Quota: httplimit.Quota{Name: "second"}}},
		Now:    nowOf(clk),
	}
	ts := serve(t, mw.Wrap(ok))
	c := ts.Client()
	const pol = `"minute";q=5;w=60, "second";q=3;w=1`
	for i := range 3 {
		r := get(t, c, ts.URL, nil)
		assert.Equal(t, 200, r.status, "request %d", i)
		assert.Equal(t, pol, r.policy)
	}
	// The fourth in the same second: refused by "second"; "minute" counted it and gave it back,
	// so it still shows 2 remaining, and t for "second" is Retry-After (1 s to the next second).
	assert.Equal(t, reply{429, pol, `"minute";r=2;t=60, "second";r=0;t=1`, "1", "rate limit exceeded\n"}, get(t, c, ts.URL, nil))
	assert.Equal(t, 429, get(t, c, ts.URL, nil).status)
	// The next second: two more fit the minute, exactly, which would not be so had the refused
	// ones been counted.
	clk.Advance(time.Second)
	assert.Equal(t, reply{200, pol, `"minute";r=1;t=59, "second";r=2;t=1`, "", "ok"}, get(t, c, ts.URL, nil))
	assert.Equal(t, 200, get(t, c, ts.URL, nil).status)
	r := get(t, c, ts.URL, nil)
	// The minute refuses first; the second, not asked, is shown as it stands (Peek): 1 left.
	assert.Equal(t, reply{429, pol, `"minute";r=0;t=59, "second";r=1;t=1`, "59", "rate limit exceeded\n"}, r)
	in, _ := perSec.Inspect("ip:127.0.0.1")
	assert.Equal(t, int64(2), in.Count, "the per-second limit was not charged for the minute's refusal")
}

// A refusal by the first limit while a later one, not asked, is used up for longer: Retry-After
// is the longer wait, so that a client that waits it is not refused again by the later limit.
func TestRetryAfterIsTheLongestWait(t *testing.T) {
	clk := clock.NewManual(w0)
	perTwoSec := newOn(t, policy.FixedWindow{Limit: 1, Window: 2 * time.Second}, clk)
	perMin := newOn(t, policy.FixedWindow{Limit: 2, Window: time.Minute}, clk)
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(perTwoSec), Quota: httplimit.Quota{Name: "2s"},
		Limits: []httplimit.Limit{{Limiter: httplimit.Local(perMin), Quota: httplimit.Quota{Name: "minute"}}},
		Now:    nowOf(clk),
	}
	ts := serve(t, mw.Wrap(ok))
	c := ts.Client()
	const pol = `"2s";q=1;w=2, "minute";q=2;w=60`
	assert.Equal(t, 200, get(t, c, ts.URL, nil).status)
	clk.Advance(2 * time.Second)
	assert.Equal(t, reply{200, pol, `"2s";r=0;t=2, "minute";r=0;t=58`, "", "ok"}, get(t, c, ts.URL, nil))
	// Refused by "2s" (2 s to wait); "minute", not asked, has nothing left for 58 s.
	assert.Equal(t, reply{429, pol, `"2s";r=0;t=2, "minute";r=0;t=58`, "58", "rate limit exceeded\n"}, get(t, c, ts.URL, nil))
	// Waiting that long is enough for both.
	clk.Advance(58 * time.Second)
	assert.Equal(t, 200, get(t, c, ts.URL, nil).status)
}

// countingRefunder is a Limiter outside the engine that gives units back through a Refund
// method, recording the calls.
type countingRefunder struct {
	l       *engine.Limiter
	mu      sync.Mutex
	refunds int
}

func (c *countingRefunder) Take(_ context.Context, key string, n int64) (slidelimit.Decision, error) {
	return c.l.Take(key, n), nil
}

func (c *countingRefunder) Refund(_ context.Context, key string, n int64, d slidelimit.Decision) (int64, error) {
	c.mu.Lock()
	c.refunds++
	c.mu.Unlock()
	return c.l.Refund(key, n, d), nil
}

// A stack: an outer middleware for the whole server (5 per minute) and an inner one for one
// route (1 per minute). The inner one's refusal gives back what the outer one counted, and the
// fields list both limits.
func TestStackedMiddlewares(t *testing.T) {
	clk := clock.NewManual(w0)
	outerLim := &countingRefunder{l: newOn(t, policy.FixedWindow{Limit: 5, Window: time.Minute}, clk)}
	inner := &httplimit.Middleware{Limiter: httplimit.Local(newOn(t, policy.FixedWindow{Limit: 1, Window: time.Minute}, clk)), Quota: httplimit.Quota{Name: "route"}, Now: nowOf(clk)}
	outer := &httplimit.Middleware{Limiter: outerLim, Quota: httplimit.Quota{Name: "server", Limit: 5, Window: time.Minute}, Now: nowOf(clk)}
	mux := http.NewServeMux()
	mux.Handle("/route", inner.Wrap(ok))
	mux.Handle("/", ok)
	ts := serve(t, outer.Wrap(mux))
	c := ts.Client()

	assert.Equal(t, reply{200, `"server";q=5;w=60, "route";q=1;w=60`, `"server";r=4;t=60, "route";r=0;t=60`, "", "ok"}, get(t, c, ts.URL+"/route", nil))
	for range 3 {
		r := get(t, c, ts.URL+"/route", nil)
		assert.Equal(t, reply{429, `"server";q=5;w=60, "route";q=1;w=60`, `"server";r=4;t=60, "route";r=0;t=60`, "60", "rate limit exceeded\n"}, r)
	}
	assert.Equal(t, 3, outerLim.refunds)
	// The outer limit still holds 4: the three refusals cost it nothing.
	for i := range 4 {
		assert.Equal(t, 200, get(t, c, ts.URL+"/other", nil).status, "request %d", i)
	}
	assert.Equal(t, reply{429, `"server";q=5;w=60`, `"server";r=0;t=60`, "60", "rate limit exceeded\n"}, get(t, c, ts.URL+"/other", nil))
}

// A stack whose inner limiter is closed: 503 under FailClosed and FailLocal, the outer limit's unit
// given back, and no field left from the outer middleware, whose count the answer no longer
// includes.
func TestStackedOverAClosedLimiter(t *testing.T) {
	for _, mode := range []httplimit.ErrorMode{httplimit.FailClosed, httplimit.FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := clock.NewManual(w0)
			outerLim := &countingRefunder{l: newOn(t, policy.FixedWindow{Limit: 5, Window: time.Minute}, clk)}
			closed := newOn(t, policy.FixedWindow{Limit: 1, Window: time.Minute}, clk)
			require.NoError(t, closed.Close())
			key := func(*http.Request) string { return "k" }
			inner := &httplimit.Middleware{Limiter: httplimit.Local(closed), KeyFunc: key, Quota: httplimit.Quota{Name: "route"}, Now: nowOf(clk), ErrorMode: mode}
			outer := &httplimit.Middleware{Limiter: outerLim, KeyFunc: key, Quota: httplimit.Quota{Name: "server", Limit: 5, Window: time.Minute}, Now: nowOf(clk)}
			ts := serve(t, outer.Wrap(inner.Wrap(ok)))
			assert.Equal(t, reply{status: 503, retryAfter: "1", body: "rate limiter unavailable\n"}, get(t, ts.Client(), ts.URL, nil))
			assert.Equal(t, 1, outerLim.refunds)
			assert.Equal(t, int64(5), outerLim.l.Peek("k").Remaining, "the outer limit holds all 5")
			_, tracked := outerLim.l.Inspect("k")
			assert.True(t, tracked, "the outer limit did count the request, then gave it back")
		})
	}
}

// A Shadow middleware below an enforcing one changes nothing: when it would refuse (or its
// limiter is closed), the request goes on, so the outer limit keeps what it counted for it.
func TestShadowBelowAnEnforcingMiddleware(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(fmt.Sprintf("closed=%v", closed), func(t *testing.T) {
			clk := clock.NewManual(w0)
			outerLim := &countingRefunder{l: newOn(t, policy.FixedWindow{Limit: 3, Window: time.Minute}, clk)}
			trial := newOn(t, policy.FixedWindow{Limit: 1, Window: time.Minute}, clk)
			if closed {
				require.NoError(t, trial.Close())
			}
			key := func(*http.Request) string { return "k" }
			inner := &httplimit.Middleware{Limiter: httplimit.Local(trial), KeyFunc: key, Quota: httplimit.Quota{Name: "trial"}, Now: nowOf(clk), Shadow: true, ErrorMode: httplimit.FailClosed}
			outer := &httplimit.Middleware{Limiter: outerLim, KeyFunc: key, Quota: httplimit.Quota{Name: "server", Limit: 3, Window: time.Minute}, Now: nowOf(clk)}
			ts := serve(t, outer.Wrap(inner.Wrap(ok)))
			var codes []int
			for range 5 {
				codes = append(codes, get(t, ts.Client(), ts.URL, nil).status)
			}
			assert.Equal(t, []int{200, 200, 200, 429, 429}, codes, "what the outer limit alone answers")
			assert.Equal(t, 0, outerLim.refunds)
			assert.Equal(t, int64(0), outerLim.l.Peek("k").Remaining)
		})
	}
}

func TestSkip(t *testing.T) {
	lim, clk := newEngine(t, 1, time.Minute, w0)
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk), Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" }}
	ts := serve(t, mw.Wrap(ok))
	for range 3 {
		assert.Equal(t, reply{status: 200, body: "ok"}, get(t, ts.Client(), ts.URL+"/healthz", nil))
	}
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL+"/", nil).status)
	assert.Equal(t, 429, get(t, ts.Client(), ts.URL+"/", nil).status)
}

func TestProblemBody(t *testing.T) {
	lim, clk := newEngine(t, 1, time.Minute, w0)
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), Now: nowOf(clk), Problem: true, Quota: httplimit.Quota{Name: "api"}}
	ts := serve(t, mw.Wrap(ok))
	get(t, ts.Client(), ts.URL, nil)
	res, err := ts.Client().Get(ts.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, 429, res.StatusCode)
	assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	assert.Equal(t, map[string]any{
		"type": "https://iana.org/assignments/http-problem-types#quota-exceeded", "title": "Too Many Requests",
		"status": 429.0, "detail": "rate limit exceeded", "violated-policies": []any{"api"},
	}, p)
}

// A request over the limit by less than MaxDelay waits and is admitted; one further over is
// refused at once.
func TestMaxDelay(t *testing.T) {
	// Real time: the delay sleeps on a timer. 20 per second is one every 50 ms.
	lim, err := engine.New(policy.GCRA{Rate: 20, Burst: 1})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	var mu sync.Mutex
	var decided []bool
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), MaxDelay: 200 * time.Millisecond, OnDecision: func(_ *http.Request, _ string, d engine.Decision) {
		mu.Lock()
		decided = append(decided, d.Allowed)
		mu.Unlock()
	}}
	ts := serve(t, mw.Wrap(ok))
	for i := range 3 {
		assert.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status, "request %d waits its turn", i)
	}
	assert.Equal(t, []bool{true, true, true}, decided, "OnDecision hears the final decision only")

	strict := &httplimit.Middleware{Limiter: httplimit.Local(lim), MaxDelay: time.Millisecond, KeyFunc: func(*http.Request) string { return "k" }}
	ts2 := serve(t, strict.Wrap(ok))
	assert.Equal(t, 200, get(t, ts2.Client(), ts2.URL, nil).status)
	assert.Equal(t, 429, get(t, ts2.Client(), ts2.URL, nil).status, "a 50 ms wait does not fit in 1 ms")
}

// A first refusal whose wait is exactly MaxDelay waits: the wait ends within MaxDelay of that
// refusal. It was refused whenever the clock had not moved a millisecond since the admission
// before it (a wait of exactly the window), as the bound was measured a few microseconds later.
func TestMaxDelayAdmitsAWaitOfExactlyMaxDelay(t *testing.T) {
	clk := clock.NewManual(1_759_999_980_000) // a minute's first millisecond: Retry-After is 60s
	lim, err := engine.New(policy.FixedWindow{Limit: 1, Window: time.Minute}, engine.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	var waiting httplimit.Waiting
	stop := make(chan struct{})
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), MaxDelay: time.Minute, Waiting: &waiting, StopWaiting: stop, KeyFunc: func(*http.Request) string { return "k" }}
	ts := serve(t, mw.Wrap(ok))
	require.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)
	done := make(chan int, 1)
	go func() { done <- get(t, ts.Client(), ts.URL, nil).status }()
	for deadline := time.Now().Add(10 * time.Second); waiting.Len() != 1; time.Sleep(time.Millisecond) {
		select {
		case status := <-done:
			t.Fatalf("a wait of 60s under a MaxDelay of 1m was answered %d at once", status)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the request neither waited nor was answered")
	}
	close(stop) // decided again at once: refused, its turn not come
	assert.Equal(t, 429, <-done)
}

// MaxWaiting bounds the requests waiting under MaxDelay at once: with room for 2, of 5 requests
// over the limit together, 3 are refused at once, not after a wait, and the 2 waiters get their
// turns as before.
func TestMaxWaiting(t *testing.T) {
	// Real time: one request a second, so a request over the limit waits about 1 s.
	lim, err := engine.New(policy.GCRA{Rate: 1, Burst: 1})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	mw := &httplimit.Middleware{Limiter: httplimit.Local(lim), MaxDelay: 5 * time.Second, MaxWaiting: 2,
		KeyFunc: func(*http.Request) string { return "k" }}
	ts := serve(t, mw.Wrap(ok))
	require.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status)

	type result struct {
		status int
		took   time.Duration
	}
	results := make(chan result, 5)
	for range 5 {
		go func() {
			start := time.Now()
			st := get(t, ts.Client(), ts.URL, nil).status
			results <- result{st, time.Since(start)}
		}()
	}
	var admitted, refusedAtOnce int
	for range 5 {
		r := <-results
		switch {
		case r.status == 200:
			admitted++
			assert.GreaterOrEqual(t, r.took, 900*time.Millisecond, "an admitted request waited its turn")
		case r.status == 429 && r.took < 500*time.Millisecond:
			refusedAtOnce++
		default:
			t.Errorf("status %d after %v: a refusal should come at once", r.status, r.took)
		}
	}
	assert.Equal(t, 2, admitted, "both waiters got their turns (at about 1 s and 2 s)")
	assert.Equal(t, 3, refusedAtOnce, "no room to wait: refused at once")
}

// Refusals that waiting does not cure have their own status and reason.
func TestRefusalReasons(t *testing.T) {
	clk := clock.NewManual(w0)
	capped := newOn(t, policy.SlidingCounter{Limit: 5, Window: time.Minute}, clk, engine.WithMaxKeys(1), engine.WithShards(1))
	var mu sync.Mutex
	var reasons []string
	record := func(_ *http.Request, _ string, d engine.Decision) {
		mu.Lock()
		reasons = append(reasons, d.Reason.String())
		mu.Unlock()
	}
	mw := &httplimit.Middleware{Limiter: httplimit.Local(capped), Now: nowOf(clk), OnDecision: record, KeyFunc: func(r *http.Request) string { return r.URL.Path }}
	ts := serve(t, mw.Wrap(ok))
	assert.Equal(t, 200, get(t, ts.Client(), ts.URL+"/a", nil).status)
	r := get(t, ts.Client(), ts.URL+"/b", nil)
	assert.Equal(t, 503, r.status)
	assert.Equal(t, "1", r.retryAfter)
	assert.Equal(t, "rate limiter at its key capacity\n", r.body)

	costly := &httplimit.Middleware{Limiter: httplimit.Local(capped), Now: nowOf(clk), OnDecision: record, KeyFunc: func(*http.Request) string { return "/a" },
		Cost: func(r *http.Request) int64 {
			if r.URL.Path == "/neg" {
				return -1
			}
			return 6
		}}
	ts2 := serve(t, costly.Wrap(ok))
	r = get(t, ts2.Client(), ts2.URL+"/neg", nil)
	assert.Equal(t, reply{500, `"default";q=5;w=60`, "", "", "rate limiter: negative cost\n"}, r, "no remaining is known of a refusal for a bad cost")
	r = get(t, ts2.Client(), ts2.URL+"/big", nil)
	assert.Equal(t, 429, r.status)
	assert.Empty(t, r.retryAfter, "waiting never admits a cost above the limit")
	assert.Equal(t, "request cost exceeds the limit\n", r.body)
	assert.Equal(t, []string{"ok", "key cap reached", "negative cost", "cost above limit"}, reasons)
}

// storeLike is an engine behind the interfaces a store offers (Take, Refund, Policy) without a
// way to read a key as it stands, as redisstore's Limiter: the middleware must then work out
// from what came back what a given-back limit holds.
type storeLike struct{ l *engine.Limiter }

func (s storeLike) Take(_ context.Context, key string, n int64) (engine.Decision, error) {
	return s.l.Take(key, n), nil
}

func (s storeLike) Refund(_ context.Context, key string, n int64, d engine.Decision) (int64, error) {
	return s.l.Refund(key, n, d), nil
}

func (s storeLike) Policy() policy.Policy { return s.l.Policy() }

// A bucket given back its unit is full again sooner by that unit's refill, in its RateLimit item's
// t, also where the Limiter cannot be read without counting: 10 at 1 a second, one request taken
// and a second given back is full 1 s later, not 2.
func TestGivenBackBucketResetWithoutPeek(t *testing.T) {
	for name, wrap := range map[string]func(*engine.Limiter) httplimit.Limiter{
		"engine":     func(l *engine.Limiter) httplimit.Limiter { return httplimit.Local(l) },
		"store-like": func(l *engine.Limiter) httplimit.Limiter { return storeLike{l} },
	} {
		clk := clock.NewManual(w0)
		bucket, err := engine.New(policy.TokenBucket{Rate: 1, Burst: 10}, engine.WithClock(clk))
		require.NoError(t, err)
		t.Cleanup(func() { bucket.Close() })
		strict, _ := newEngine(t, 1, time.Minute, w0)
		mw := &httplimit.Middleware{
			Limiter: wrap(bucket), Quota: httplimit.Quota{Name: "bucket"}, Now: nowOf(clk),
			Limits: []httplimit.Limit{{Limiter: httplimit.Local(strict), Quota: httplimit.Quota{Name: "strict"}}},
		}
		ts := serve(t, mw.Wrap(ok))
		require.Equal(t, 200, get(t, ts.Client(), ts.URL, nil).status, name)
		r := get(t, ts.Client(), ts.URL, nil)
		require.Equal(t, 429, r.status, name)
		assert.Contains(t, r.rateLimit, `"bucket";r=9;t=1,`, name)
	}
}

// A limit not asked, because an earlier one refused, lengthens Retry-After and shows its own t by
// the wait for the request's cost, not for one unit: a bucket with 3 of 10 tokens at 1 a second
// has a unit for a request of 5 units, and its 5 only 2 s later.
func TestRetryAfterOfLimitNotAskedIsForTheCost(t *testing.T) {
	clk := clock.NewManual(w0)
	window := newOn(t, policy.FixedWindow{Limit: 5, Window: time.Second}, clk)
	bucket := newOn(t, policy.TokenBucket{Rate: 1, Burst: 10}, clk)
	require.True(t, window.AllowN("k", 5))
	require.True(t, bucket.AllowN("k", 7))
	mw := &httplimit.Middleware{
		Limiter: httplimit.Local(window), Quota: httplimit.Quota{Name: "window"}, Now: nowOf(clk),
		Limits:  []httplimit.Limit{{Quota: httplimit.Quota{Name: "bucket"}}},
		KeyFunc: func(*http.Request) string { return "k" },
		Cost:    func(*http.Request) int64 { return 5 },
	}
	for _, c := range []struct {
		name       string
		bucket     httplimit.Limiter
		retryAfter string
		rateLimit  string
	}{
		// The bucket's 5 tokens are there 2 s on, the window's 1 s.
		{"engine", httplimit.Local(bucket), "2", `"window";r=0;t=1, "bucket";r=3;t=2`},
		// A Limiter of the caller's own with a method PeekN is read the same way.
		{"own PeekN", costPeeker{bucket, false}, "2", `"window";r=0;t=1, "bucket";r=3;t=2`},
		// One whose PeekN refuses the cost without judging the key (as GCRA refuses a cost above
		// its burst) adds no wait: it is shown as it stands for a unit, with its reset time.
		{"PeekN refusing blind", costPeeker{bucket, true}, "1", `"window";r=0;t=1, "bucket";r=3;t=7`},
		// A Limiter with only Peek is read for one unit, as before: its unit is there now.
		{"Peek only", unitPeeker{bucket}, "1", `"window";r=0;t=1, "bucket";r=3;t=7`},
	} {
		mw.Limits[0].Limiter = c.bucket
		ts := serve(t, mw.Wrap(ok))
		r := get(t, ts.Client(), ts.URL, nil)
		require.Equal(t, 429, r.status, c.name)
		assert.Equal(t, c.retryAfter, r.retryAfter, c.name)
		assert.Equal(t, c.rateLimit, r.rateLimit, c.name)
		assert.Equal(t, int64(3), bucket.Peek("k").Remaining, "%s: the bucket was not asked: nothing taken", c.name)
	}
}

// costPeeker is an engine behind Take and PeekN alone; blind makes its PeekN refuse any cost
// above 1 without reading the key, as a cost above what a policy can ever admit is refused.
type costPeeker struct {
	l     *engine.Limiter
	blind bool
}

func (c costPeeker) Take(_ context.Context, key string, n int64) (engine.Decision, error) {
	return c.l.Take(key, n), nil
}

func (c costPeeker) PeekN(key string, n int64) engine.Decision {
	if c.blind && n > 1 {
		return engine.Decision{Limit: 10, Reason: engine.ReasonCostAboveLimit}
	}
	return c.l.PeekN(key, n)
}

// unitPeeker is an engine behind Take and Peek alone, as a Limiter of the caller's own might be.
type unitPeeker struct{ l *engine.Limiter }

func (u unitPeeker) Take(_ context.Context, key string, n int64) (engine.Decision, error) {
	return u.l.Take(key, n), nil
}

func (u unitPeeker) Peek(key string) engine.Decision { return u.l.Peek(key) }

// A stack whose inner middleware is misconfigured (no Limiter): 500, the outer limit's unit given
// back, and no field left from the outer middleware, as for an inner limiter that is closed.
func TestStackedOverAMisconfiguredMiddleware(t *testing.T) {
	clk := clock.NewManual(w0)
	outerLim := &countingRefunder{l: newOn(t, policy.FixedWindow{Limit: 5, Window: time.Minute}, clk)}
	key := func(*http.Request) string { return "k" }
	inner := &httplimit.Middleware{KeyFunc: key, OnError: func(*http.Request, string, error) {}}
	outer := &httplimit.Middleware{Limiter: outerLim, KeyFunc: key, Quota: httplimit.Quota{Name: "server", Limit: 5, Window: time.Minute}, Now: nowOf(clk)}
	ts := serve(t, outer.Wrap(inner.Wrap(ok)))
	assert.Equal(t, reply{status: 500, body: "rate limiter misconfigured\n"}, get(t, ts.Client(), ts.URL, nil))
	assert.Equal(t, 1, outerLim.refunds)
	assert.Equal(t, int64(5), outerLim.l.Peek("k").Remaining, "the outer limit holds all 5")
}

// TestStackedOverAMisconfiguredMiddlewareAlone runs the test above in a process of its own, where
// its two Wrap calls are the process's only ones: the other tests' handlers must not be what
// makes the outer middleware pass its decisions down.
func TestStackedOverAMisconfiguredMiddlewareAlone(t *testing.T) {
	if os.Getenv("HTTPLIMIT_ALONE") != "" {
		t.Skip("the child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStackedOverAMisconfiguredMiddleware$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "HTTPLIMIT_ALONE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}
