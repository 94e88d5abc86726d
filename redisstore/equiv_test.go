package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// TestEquivalentToEngine runs the same random sequences, with explicit times from one manual
// clock, through the in-process engine and through redisstore (deny cache off and on) against a
// real server, and requires identical Decision fields at every step. Times never run backwards
// here, as the engine's clock never does. Policies the engine does not accept yet are skipped.
func TestEquivalentToEngine(t *testing.T) {
	ctx := context.Background()
	for ci, c := range policyCases() {
		t.Run(caseName(c.p, c.start), func(t *testing.T) {
			clk := clock.NewManual(c.start)
			eng, err := engine.New(c.p, engine.WithClock(clk))
			if err != nil {
				t.Skipf("engine.New: %v", err)
			}
			defer eng.Close()
			plain := mustNew(t, "plain", c.p, WithClock(clk), WithDenyCache(0))
			cached := mustNew(t, "cached", c.p, WithClock(clk))
			r := rand.New(rand.NewPCG(uint64(ci), 23))
			for i, s := range randomSteps(r, c.p, c.start, 300, false) {
				clk.Set(s.now)
				key := fmt.Sprint("k", s.key)
				want := eng.Take(key, s.cost)
				for _, l := range []*Limiter{plain, cached} {
					got, err := l.Take(ctx, key, s.cost)
					if err != nil {
						t.Fatalf("step %d: %s: %v", i, l.Name(), err)
					}
					if !sameDecision(got, want) || got.Counted != want.Counted {
						t.Fatalf("step %d (%s, now %d, cost %d), %s:\n redis  %+v\n engine %+v", i, key, s.now, s.cost, l.Name(), got, want)
					}
				}
			}
			// Negative costs never reach Redis and must still read as the engine's.
			want := eng.Take("k0", -3)
			if got, _ := plain.Take(ctx, "k0", -3); !sameDecision(got, want) {
				t.Fatalf("negative cost: redis %+v, engine %+v", got, want)
			}
		})
	}
}

// TestGCRAEqualsTokenBucket runs the same sequences through the GCRA and token bucket scripts:
// with the same rate and burst they must make the same decisions, field for field (policy
// package: "GCRA and TokenBucket ... report the same Result on any sequence with non-decreasing
// times").
func TestGCRAEqualsTokenBucket(t *testing.T) {
	ctx := context.Background()
	for ci, c := range policyCases() {
		g, ok := c.p.(policy.GCRA)
		if !ok {
			continue
		}
		t.Run(caseName(c.p, c.start), func(t *testing.T) {
			clk := clock.NewManual(c.start)
			lg := mustNew(t, "gcra", g, WithClock(clk))
			lt := mustNew(t, "bucket", policy.TokenBucket(g), WithClock(clk))
			r := rand.New(rand.NewPCG(uint64(ci), 31))
			for i, s := range randomSteps(r, c.p, c.start, 300, false) {
				clk.Set(s.now)
				key := fmt.Sprint("k", s.key)
				a, errA := lg.Take(ctx, key, s.cost)
				b, errB := lt.Take(ctx, key, s.cost)
				if errA != nil || errB != nil {
					t.Fatal(errA, errB)
				}
				if s.cost > g.Burst {
					// GCRA refuses before any lookup; the bucket reports its tokens.
					if a.Allowed || b.Allowed || a.Reason != b.Reason {
						t.Fatalf("step %d: cost above burst: gcra %+v, bucket %+v", i, a, b)
					}
					continue
				}
				if !sameDecision(a, b) {
					t.Fatalf("step %d (%s, now %d, cost %d):\n gcra   %+v\n bucket %+v", i, key, s.now, s.cost, a, b)
				}
			}
		})
	}
}
