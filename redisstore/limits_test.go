package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
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
