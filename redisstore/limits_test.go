package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// TestTakeWithLimitEqualsEngine runs random sequences with a per-key limit through the engine's
// TakeWithLimit and redisstore's, for the policies the engine takes per-key limits for.
func TestTakeWithLimitEqualsEngine(t *testing.T) {
	ctx := context.Background()
	const start = 1_760_000_000_123
	for ci, c := range []struct {
		p      policy.Policy
		opts   []engine.Option
		limits []int64
	}{
		{policy.SlidingCounter{Limit: 10, Window: time.Second}, []engine.Option{engine.WithMaxLimit(1000)}, []int64{1, 3, 10, 77, 1000}},
		{policy.SlidingCounter{Limit: 5, Window: 7 * time.Millisecond}, []engine.Option{engine.WithMaxLimit(50)}, []int64{1, 2, 5, 50}},
		{policy.FixedWindow{Limit: 100, Window: time.Second}, nil, []int64{1, 7, 50, 100}},
	} {
		t.Run(caseName(c.p, start), func(t *testing.T) {
			clk := clock.NewManual(start)
			eng, err := engine.New(c.p, append(c.opts, engine.WithClock(clk))...)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			l := mustNew(t, "perkey", c.p, WithClock(clk))
			r := rand.New(rand.NewPCG(uint64(ci), 41))
			for i, s := range randomSteps(r, c.p, start, 400, false) {
				clk.Set(s.now)
				key := fmt.Sprint("k", s.key)
				// Mostly the key's own limit, sometimes another (a changed limit).
				limit := c.limits[s.key%len(c.limits)]
				if r.IntN(10) == 0 {
					limit = c.limits[r.IntN(len(c.limits))]
				}
				cost := min(s.cost, limit+2)
				want := eng.TakeWithLimit(key, cost, limit)
				got, err := l.TakeWithLimit(ctx, key, cost, limit)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if !sameDecision(got, want) {
					t.Fatalf("step %d (%s, now %d, cost %d, limit %d):\n redis  %+v\n engine %+v", i, key, s.now, cost, limit, got, want)
				}
			}
		})
	}
}

func TestTakeWithLimitRefusesWhatItCannot(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(1_000_000)
	sc := mustNew(t, "perkey", policy.SlidingCounter{Limit: 10, Window: time.Second}, WithClock(clk))
	for _, limit := range []int64{0, -1, policy.MaxLimit + 1} {
		if d, err := sc.TakeWithLimit(ctx, "k", 1, limit); err != nil || d.Allowed || d.Reason != engine.ReasonInvalidLimit {
			t.Fatalf("limit %d: %+v, %v", limit, d, err)
		}
	}
	tb := mustNew(t, "perkey", policy.TokenBucket{Rate: 1, Burst: 5}, WithClock(clk))
	if d, _ := tb.TakeWithLimit(ctx, "k", 1, 3); d.Allowed || d.Reason != engine.ReasonInvalidLimit {
		t.Fatalf("token bucket with a per-call limit: %+v", d)
	}
	// The sliding log: 3 per second for this key, then raised to 5 mid-window.
	log := mustNew(t, "perkey", policy.SlidingLog{Limit: 10, Window: time.Second}, WithClock(clk))
	for i := range 5 {
		d, err := log.TakeWithLimit(ctx, "k", 1, 3)
		if err != nil || d.Allowed != (i < 3) || d.Limit != 3 {
			t.Fatalf("sliding log limit 3, take %d: %+v, %v", i, d, err)
		}
	}
	if d, _ := log.TakeWithLimit(ctx, "k", 2, 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("sliding log raised to 5: %+v", d)
	}
	if d, _ := log.TakeWithLimit(ctx, "k", 1, policy.MaxLogLimit+1); d.Reason != engine.ReasonInvalidLimit {
		t.Fatalf("sliding log limit above MaxLogLimit: %+v", d)
	}
}

// A sliding log that a larger per-call limit filled with more than 32 distinct times is refused
// under a smaller limit, per call or the policy's, as any key past its limit is: the script once
// sent such a log back whole (for the deny cache) under a limit of at most 32, a reply Take did
// not accept, so the default FailOpen admitted, uncounted, until the log decayed.
func TestSlidingLogLoweredBelowALongLogRefuses(t *testing.T) {
	ctx := context.Background()
	const t0 = 1_760_000_000_000
	for _, c := range []struct {
		name   string
		policy int64
		take   func(l *Limiter) (engine.Decision, error)
	}{
		{"per call", 100, func(l *Limiter) (engine.Decision, error) { return l.TakeWithLimit(ctx, "k", 1, 10) }},
		{"policy", 10, func(l *Limiter) (engine.Decision, error) { return l.Take(ctx, "k", 1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			l := mustNew(t, "loglower"+strings.ReplaceAll(c.name, " ", ""), policy.SlidingLog{Limit: c.policy, Window: time.Minute}, WithClock(clk))
			for i := range 40 {
				clk.Set(t0 + int64(i))
				if d, err := l.TakeWithLimit(ctx, "k", 1, 100); err != nil || !d.Allowed {
					t.Fatalf("take %d at limit 100: %+v, %v", i, d, err)
				}
			}
			for range 2 { // the second may come from the deny cache
				d, err := c.take(l)
				if err != nil || d.Allowed || d.Reason != engine.ReasonLimited || d.Remaining != 0 {
					t.Fatalf("limit 10 with 40 taken: %+v, %v; want a refusal (ReasonLimited, nothing remaining) and no error", d, err)
				}
				// The oldest of the 40 leaves the window a minute after it came; 31 must leave.
				if want := time.Minute - 39*time.Millisecond + 30*time.Millisecond; d.RetryAfter != want {
					t.Fatalf("RetryAfter %v, want %v", d.RetryAfter, want)
				}
			}
		})
	}
}

// The deny cache answers a refusal as Redis would after a larger per-call limit filled the log
// past the policy's limit: the cache rebuilds a log at the policy's limit, which would keep only
// its oldest entries, so such a refusal is not remembered.
func TestSlidingLogDenyCacheAfterARaisedLimit(t *testing.T) {
	ctx := context.Background()
	const t0 = 1_760_000_000_000
	clk := clock.NewManual(t0)
	p := policy.SlidingLog{Limit: 5, Window: time.Second}
	plain := mustNew(t, "logplain", p, WithClock(clk), WithDenyCache(0))
	cached := mustNew(t, "logcached", p, WithClock(clk))
	for i := range 20 {
		clk.Set(t0 + int64(i))
		for _, l := range []*Limiter{plain, cached} {
			if d, err := l.TakeWithLimit(ctx, "k", 1, 20); err != nil || !d.Allowed {
				t.Fatalf("%s take %d at limit 20: %+v, %v", l.Name(), i, d, err)
			}
		}
	}
	for i := range 5 {
		clk.Set(t0 + 20 + int64(i))
		want, err1 := plain.Take(ctx, "k", 1)
		got, err2 := cached.Take(ctx, "k", 1)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if want.Allowed || !sameDecision(got, want) {
			t.Fatalf("step %d: with the deny cache %+v, without %+v (want the same refusal)", i, got, want)
		}
	}
}
