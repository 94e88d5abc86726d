package engine

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/internal/rules"
	"github.com/slidelimit/slidelimit/policy"
)

// This file tests every policy other than the sliding counter through the engine, against the
// pure functions of internal/rules (which have their own tests against docs/policies.md).

// pureModel is one policy's pure step over many keys, with docs/policies.md's rules for keys: a key
// is created on its first take even if refused, except by GCRA, which refuses a cost above its
// burst before any lookup and keeps state only on admission. Keys are never forgotten.
type pureModel interface {
	take(key uint64, now, cost int64) policy.Result
	peek(key uint64, now int64) (policy.Result, policy.Probe, bool)
	size() int
}

type pure[S any] struct {
	limit   int64
	fresh   func(int64) S
	step    func(*S, int64, int64) policy.Result
	look    func(S, int64) (policy.Result, policy.Probe)
	gcra    bool
	keys    map[uint64]*S
	refuses func(int64) bool
}

func (m *pure[S]) take(key uint64, now, cost int64) policy.Result {
	if m.refuses != nil && m.refuses(cost) {
		return policy.Result{Limit: m.limit} // refused before lookup: nothing else is known
	}
	s, ok := m.keys[key]
	if !ok {
		f := m.fresh(now)
		s = &f
		r := m.step(s, now, cost)
		if r.Allowed || !m.gcra {
			m.keys[key] = s
		}
		return r
	}
	return m.step(s, now, cost)
}

func (m *pure[S]) peek(key uint64, now int64) (policy.Result, policy.Probe, bool) {
	if s, ok := m.keys[key]; ok {
		r, pr := m.look(*s, now)
		return r, pr, true
	}
	r, pr := m.look(m.fresh(now), now)
	return r, pr, false
}

func (m *pure[S]) size() int { return len(m.keys) }

type gcraModel struct {
	s    rules.GCRAState
	last int64 // the last admission
}

func newPure[S any](limit int64, fresh func(int64) S, step func(*S, int64, int64) policy.Result, look func(S, int64) (policy.Result, policy.Probe)) *pure[S] {
	return &pure[S]{limit: limit, fresh: fresh, step: step, look: look, keys: map[uint64]*S{}}
}

// modelOf returns the pure model of p, its limit, and its natural time scale in ms (the window,
// or the time to fill or drain completely).
func modelOf(p policy.Policy) (pureModel, int64, int64) {
	switch p := p.(type) {
	case policy.SlidingLog:
		return newPure(p.Limit, rules.SlidingLog(p).Fresh, rules.SlidingLog(p).Take, rules.SlidingLog(p).Peek), p.Limit, rules.SlidingLog(p).WindowMs()
	case policy.FixedWindow:
		return newPure(p.Limit, rules.FixedWindow(p).Fresh, rules.FixedWindow(p).Take, rules.FixedWindow(p).Peek), p.Limit, rules.FixedWindow(p).WindowMs()
	case policy.TokenBucket:
		return newPure(p.Burst, rules.TokenBucket(p).Fresh, rules.TokenBucket(p).Take, rules.TokenBucket(p).Peek), p.Burst, rules.TokenBucket(p).FillMs()
	case policy.GCRA:
		// rules.GCRA reads a TAT exactly only up to MaxIdleMs after it was written (24.8 days at
		// the largest rate), and the model never forgets; so it renews a state FillMs after its
		// last admission, when the bucket is full for certain, as the engine's sweeps do.
		fill := rules.GCRA(p).FillMs()
		renew := func(s *gcraModel, now int64) {
			if now-s.last >= fill {
				*s = gcraModel{rules.GCRA(p).Fresh(now), now}
			}
		}
		m := newPure(p.Burst, func(now int64) gcraModel { return gcraModel{rules.GCRA(p).Fresh(now), now} },
			func(s *gcraModel, now, cost int64) policy.Result {
				renew(s, now)
				r := rules.GCRA(p).Take(&s.s, now, cost)
				if r.Allowed && cost > 0 {
					s.last = now
				}
				return r
			},
			func(s gcraModel, now int64) (policy.Result, policy.Probe) {
				renew(&s, now)
				return rules.GCRA(p).Peek(s.s, now)
			})
		m.gcra, m.refuses = true, func(c int64) bool { return !rules.GCRA(p).CheckCost(c) }
		return m, p.Burst, fill
	case policy.LeakyBucket:
		return newPure(p.Capacity, rules.LeakyBucket(p).Fresh, rules.LeakyBucket(p).Take, rules.LeakyBucket(p).Peek), p.Capacity, rules.LeakyBucket(p).DrainMs()
	case policy.DualBucket:
		return newPure(p.TokensPerMin, rules.DualBucket(p).Fresh, rules.DualBucket(p).Take, rules.DualBucket(p).Peek), p.TokensPerMin, rules.DualPeriodMs
	}
	panic(fmt.Sprintf("no model for %T", p))
}

var (
	pcRates  = []int64{1, 3, 7, 100, 1000, 2500, 1 << 20, math.MaxUint32}
	pcBursts = []int64{1, 2, 5, 100, 1 << 20, math.MaxUint32}
	pcWindow = []int64{1, 2, 7, 1000, 60_000, 2_592_000_000, 1 << 31, 1 << 32}
)

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// advance moves a manual clock on by dt ms, which may exceed what a time.Duration holds.
func advance(clk *clock.Clock, dt int64) { clk.Set(clk.Now() + dt) }

// drawPolicy draws a configuration of the policy id, over its whole range: the extremes, and
// values on both sides of every one-word/two-word boundary of the cells.
func drawPolicy(t *rapid.T, id string) policy.Policy {
	switch id {
	case "sliding-log":
		return policy.SlidingLog{
			Limit:  rapid.SampledFrom([]int64{1, 2, 3, 10, 100, policy.MaxLogLimit}).Draw(t, "limit"),
			Window: ms(rapid.SampledFrom([]int64{1, 7, 1000, 60_000, 1 << 32}).Draw(t, "windowMs")),
		}
	case "fixed-window":
		return policy.FixedWindow{
			Limit:  rapid.SampledFrom([]int64{1, 2, 3, 100, 1<<21 - 1, math.MaxUint32}).Draw(t, "limit"),
			Window: ms(rapid.SampledFrom(pcWindow).Draw(t, "windowMs")),
		}
	case "token-bucket":
		return policy.TokenBucket{Rate: rapid.SampledFrom(pcRates).Draw(t, "rate"), Burst: rapid.SampledFrom(pcBursts).Draw(t, "burst")}
	case "gcra":
		return policy.GCRA{Rate: rapid.SampledFrom(pcRates).Draw(t, "rate"), Burst: rapid.SampledFrom(pcBursts).Draw(t, "burst")}
	case "leaky-bucket":
		return policy.LeakyBucket{Rate: rapid.SampledFrom(pcRates).Draw(t, "rate"), Capacity: rapid.SampledFrom(pcBursts).Draw(t, "capacity")}
	case "dual-bucket":
		return policy.DualBucket{
			RequestsPerMin: rapid.SampledFrom([]int64{1, 3, 7, 31, 60, 500, 1 << 20, math.MaxUint32}).Draw(t, "rpm"),
			TokensPerMin:   rapid.SampledFrom([]int64{1, 13, 37, 1000, 30_000, 100_000, 1 << 20, math.MaxUint32}).Draw(t, "tpm"),
		}
	}
	panic(id)
}

var pcIDs = []string{"sliding-log", "fixed-window", "token-bucket", "gcra", "leaky-bucket", "dual-bucket"}

// requireDecision checks a Decision against the pure Result for cost; counted is what the
// decision counted if admitted (cost for a take, 0 for a peek).
func requireDecision(t require.TestingT, r policy.Result, cost, counted int64, d Decision, msg string, args ...any) {
	reason := ReasonOK
	if !r.Allowed {
		reason = ReasonLimited
		if cost > r.Limit {
			reason = ReasonCostAboveLimit
		}
	}
	want := Decision{
		Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining, RetryAfter: ms(r.RetryAfterMs),
		ResetAt: time.UnixMilli(r.ResetAtMs), Reason: reason,
	}
	if r.Allowed {
		want.Counted = counted
	}
	require.Equal(t, want, d, append([]any{msg}, args...)...)
}

// TestPoliciesMatchPure drives the engine and the pure model with the same random operations on
// a few keys and requires every Decision, probe and key count to agree. Time jumps by up to five
// of the policy's scales, past the cells' horizons, and by up to 2^40 ms. With eviction on, the
// sweeper is stepped by hand at random points: eviction must never change a decision (keys come
// and go, so only the decisions and probes are compared).
func TestPoliciesMatchPure(t *testing.T) {
	for _, id := range pcIDs {
		t.Run(id, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				p := drawPolicy(rt, id)
				evict := rapid.Bool().Draw(rt, "evict")
				clk := clock.NewManual(rapid.Int64Range(0, 1<<42).Draw(rt, "start"))
				l, err := New(p, WithClock(clk), WithShards(rapid.SampledFrom([]int{1, 4, 256}).Draw(rt, "shards")),
					WithEviction(evict), WithSweepInterval(time.Hour))
				require.NoError(rt, err)
				defer l.Close()
				m, limit, scale := modelOf(p)
				horizon := min(l.codec.Horizon(), 1<<43)
				keys := rapid.IntRange(1, 4).Draw(rt, "keys")
				for i := range rapid.IntRange(1, 150).Draw(rt, "ops") {
					switch rapid.IntRange(0, 12).Draw(rt, "time") {
					case 0:
						advance(clk, rapid.Int64Range(0, min(5*scale, 1<<42)).Draw(rt, "jump"))
					case 1:
						advance(clk, rapid.Int64Range(horizon/2, 2*horizon).Draw(rt, "pastHorizon"))
					case 2:
						advance(clk, rapid.Int64Range(0, 1<<40).Draw(rt, "far"))
					case 3, 4, 5:
						advance(clk, rapid.Int64Range(0, min(scale, 1<<40)/3+1).Draw(rt, "tick"))
					}
					if evict && rapid.IntRange(0, 4).Draw(rt, "sweep") == 0 {
						l.sweeper.Step(1 << 20)
					}
					now := clk.Now()
					key := uint64(rapid.IntRange(0, keys-1).Draw(rt, "key"))
					switch rapid.IntRange(0, 4).Draw(rt, "call") {
					case 0, 1:
						cost := drawCost(rt, limit)
						want := m.take(key, now, cost)
						d := l.TakeKey(key, cost)
						if _, gcra := p.(policy.GCRA); gcra && cost > limit {
							// Refused before any lookup: no state, so no reset time.
							require.True(rt, d.ResetAt.IsZero(), "op %d: GCRA refusal before lookup has a ResetAt", i)
							want.ResetAtMs = 0
							d.ResetAt = time.UnixMilli(0)
						}
						requireDecision(rt, want, cost, cost, d, "op %d: take(%d, %d) at %d", i, key, cost, now)
					case 2:
						cost := drawCost(rt, limit)
						want := m.take(key, now, cost)
						require.Equal(rt, want.Allowed, l.AllowKey(key, cost), "op %d: allow(%d, %d) at %d", i, key, cost, now)
					case 3:
						want, _, _ := m.peek(key, now)
						requireDecision(rt, want, 1, 0, l.PeekKey(key), "op %d: peek(%d) at %d", i, key, now)
					case 4:
						_, want, tracked := m.peek(key, now)
						got, ok := l.InspectKey(key)
						require.Equal(rt, want, got, "op %d: inspect(%d) at %d", i, key, now)
						if !evict {
							require.Equal(rt, tracked, ok, "op %d: tracked(%d)", i, key)
						}
					}
					if evict {
						require.LessOrEqual(rt, l.Len(), m.size(), "op %d", i)
					} else {
						require.Equal(rt, m.size(), l.Len(), "op %d: stateSize", i)
					}
				}
			})
		})
	}
}

func drawCost(t *rapid.T, limit int64) int64 {
	switch rapid.IntRange(0, 5).Draw(t, "costKind") {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return limit
	case 3:
		return limit + rapid.Int64Range(1, 1<<40).Draw(t, "over")
	}
	return rapid.Int64Range(0, min(limit, 1<<20)).Draw(t, "cost")
}

// TestPoliciesRetryAfterIsHonoured: with one key and no other traffic, a request refused with a
// RetryAfter is still refused 1 ms before it and admitted exactly at it, for every policy.
func TestPoliciesRetryAfterIsHonoured(t *testing.T) {
	for _, id := range pcIDs {
		t.Run(id, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				p := drawPolicy(rt, id)
				clk := clock.NewManual(start + rapid.Int64Range(0, 1<<20).Draw(rt, "offset"))
				l, err := New(p, WithClock(clk), WithEviction(rapid.Bool().Draw(rt, "evict")))
				require.NoError(rt, err)
				defer l.Close()
				_, limit, scale := modelOf(p)
				for range rapid.IntRange(0, 6).Draw(rt, "fills") {
					l.AllowN("k", rapid.Int64Range(0, limit).Draw(rt, "fill"))
					advance(clk, rapid.Int64Range(0, min(scale, 1<<40)).Draw(rt, "gap"))
				}
				cost := rapid.Int64Range(1, limit).Draw(rt, "cost")
				d := l.Take("k", cost)
				if d.Allowed {
					return
				}
				require.Positive(rt, d.RetryAfter, "%v", d)
				clk.Advance(d.RetryAfter - time.Millisecond)
				require.False(rt, l.AllowN("k", cost), "cost %d admitted 1 ms before a RetryAfter of %v", cost, d.RetryAfter)
				clk.Advance(time.Millisecond)
				require.True(rt, l.AllowN("k", cost), "cost %d refused after a RetryAfter of %v", cost, d.RetryAfter)
			})
		})
	}
}

// TestPoliciesBoundaryBurst: limit unit requests 1 ms before a window edge and limit more at the
// edge. The fixed window starts again from zero and admits all 2×limit; the sliding policies
// admit exactly limit, since the first ones are still inside their trailing window.
func TestPoliciesBoundaryBurst(t *testing.T) {
	for _, c := range []struct {
		p    func(limit int64) policy.Policy
		want func(limit int64) int64
	}{
		{func(n int64) policy.Policy { return policy.FixedWindow{Limit: n, Window: time.Second} }, func(n int64) int64 { return 2 * n }},
		{func(n int64) policy.Policy { return policy.SlidingLog{Limit: n, Window: time.Second} }, func(n int64) int64 { return n }},
		{func(n int64) policy.Policy { return policy.SlidingCounter{Limit: n, Window: time.Second} }, func(n int64) int64 { return n }},
	} {
		for _, limit := range []int64{1, 7, 100, 1000} {
			p := c.p(limit)
			clk := clock.NewManual(start + 999) // start is a whole second: the edge is at start+1000
			l, err := New(p, WithClock(clk))
			require.NoError(t, err)
			admitted := int64(0)
			for _, at := range []int64{start + 999, start + 1000} {
				clk.Set(at)
				for range limit {
					if l.Allow("k") {
						admitted++
					}
				}
			}
			require.Equal(t, c.want(limit), admitted, "%s limit %d", p.ID(), limit)
			// For the log, the first batch leaves the window one window after it came.
			if _, ok := p.(policy.SlidingLog); ok {
				clk.Set(start + 1998)
				require.False(t, l.Allow("k"))
				clk.Set(start + 1999)
				require.True(t, l.AllowN("k", limit))
			}
			l.Close()
		}
	}
}

// TestGCRAEqualsTokenBucket: with the same rate and burst, GCRA and the token bucket decide every
// request alike and report the same Decision (for a cost above the burst, which GCRA refuses
// before looking the key up, the same verdict, reason and RetryAfter).
func TestGCRAEqualsTokenBucket(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rate, burst := rapid.SampledFrom(pcRates).Draw(rt, "rate"), rapid.SampledFrom(pcBursts).Draw(rt, "burst")
		clk := clock.NewManual(rapid.Int64Range(0, 1<<42).Draw(rt, "start"))
		evict := WithEviction(rapid.Bool().Draw(rt, "evict"))
		g, err := New(policy.GCRA{Rate: rate, Burst: burst}, WithClock(clk), evict)
		require.NoError(rt, err)
		defer g.Close()
		tb, err := New(policy.TokenBucket{Rate: rate, Burst: burst}, WithClock(clk), evict)
		require.NoError(rt, err)
		defer tb.Close()
		fill := rules.TokenBucket{Rate: rate, Burst: burst}.FillMs()
		for i := range rapid.IntRange(1, 150).Draw(rt, "ops") {
			if rapid.Bool().Draw(rt, "advance") {
				advance(clk, rapid.Int64Range(0, min(fill, 1<<40)/2+1).Draw(rt, "dt"))
			}
			key := uint64(rapid.IntRange(0, 2).Draw(rt, "key"))
			switch rapid.IntRange(0, 3).Draw(rt, "call") {
			case 0, 1:
				cost := drawCost(rt, burst)
				dg, dt := g.TakeKey(key, cost), tb.TakeKey(key, cost)
				if cost > burst {
					require.Equal(rt, [3]any{dt.Allowed, dt.Reason, dt.RetryAfter}, [3]any{dg.Allowed, dg.Reason, dg.RetryAfter}, "op %d", i)
				} else {
					require.Equal(rt, dt, dg, "op %d: take(%d, %d)", i, key, cost)
				}
			case 2:
				require.Equal(rt, tb.PeekKey(key), g.PeekKey(key), "op %d: peek(%d)", i, key)
			case 3:
				pg, _ := g.InspectKey(key)
				pt, _ := tb.InspectKey(key)
				require.Equal(rt, pt.Tokens, pg.Tokens, "op %d: tokensOf(%d)", i, key)
			}
		}
	})
}

// concurrencyCase is a configuration for the concurrency tests: cost chooses worker w's i-th
// cost, and units reports the units a key's probe shows as taken (with the clock frozen, nothing
// refills, drains or expires).
type concurrencyCase struct {
	name  string
	p     policy.Policy
	words int
	cap   int64 // the units a frozen key admits in all
	cost  func(w, i int) int64
	units func(policy.Probe) int64
}

func concurrencyCases() []concurrencyCase {
	unit := func(int, int) int64 { return 1 }
	mixed := func(w, i int) int64 { return int64(1 + (i+w)%3) }
	// (cost(0, 0) is the cheapest cost of each.)
	big := func(w, i int) int64 { return 4096 + int64(w) }
	count := func(pr policy.Probe) int64 { return pr.Count }
	level := func(pr policy.Probe) int64 { return pr.Level }
	spent := func(burst int64) func(policy.Probe) int64 {
		return func(pr policy.Probe) int64 { return burst - pr.Tokens }
	}
	return []concurrencyCase{
		{"sliding-log", policy.SlidingLog{Limit: 2000, Window: time.Minute}, 1, 2000, mixed, count},
		{"fixed-window", policy.FixedWindow{Limit: 2000, Window: time.Minute}, 1, 2000, mixed, count},
		{"fixed-window/max", policy.FixedWindow{Limit: math.MaxUint32, Window: time.Minute}, 1, math.MaxUint32, func(w, i int) int64 { return 1<<24 + int64(w) }, count},
		{"token-bucket", policy.TokenBucket{Rate: 10, Burst: 2000}, 1, 2000, mixed, spent(2000)},
		{"token-bucket/pair", policy.TokenBucket{Rate: 1, Burst: 1 << 20}, 2, 1 << 20, big, spent(1 << 20)},
		{"gcra", policy.GCRA{Rate: 10, Burst: 2000}, 1, 2000, mixed, spent(2000)},
		{"gcra/max", policy.GCRA{Rate: math.MaxUint32, Burst: math.MaxUint32}, 1, math.MaxUint32, func(w, i int) int64 { return 1<<24 + int64(w) }, spent(math.MaxUint32)},
		{"leaky-bucket", policy.LeakyBucket{Rate: 10, Capacity: 2000}, 1, 2000, mixed, level},
		{"leaky-bucket/pair", policy.LeakyBucket{Rate: 1, Capacity: 1 << 20}, 2, 1 << 20, big, level},
		{"dual-bucket", policy.DualBucket{RequestsPerMin: 5000, TokensPerMin: 2000}, 1, 2000, mixed, spent(2000)},
		// 97 requests and 37 tokens: 7 + 6 bits of counts and 16 + 16 of credits leave 17 bits of time.
		{"dual-bucket/pair", policy.DualBucket{RequestsPerMin: 97, TokensPerMin: 37}, 2, 37, mixed, spent(37)},
		{"dual-bucket/requests", policy.DualBucket{RequestsPerMin: 500, TokensPerMin: 100_000}, 1, 500, unit,
			func(pr policy.Probe) int64 { return 500 - pr.Requests }},
	}
}

// TestPoliciesConcurrentExactness: with the clock frozen, goroutines hammering the same keys never
// admit more than a serial run would, and every admitted unit is in the key's state: none is
// lost to a racing compare-and-swap (or, for the log, a racing lock).
func TestPoliciesConcurrentExactness(t *testing.T) {
	for _, c := range concurrencyCases() {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(start)
			l, err := New(c.p, WithClock(clk), WithShards(4))
			require.NoError(t, err)
			defer l.Close()
			require.Equal(t, c.words, l.codec.Words())
			const workers, keys = 8, 3
			// Enough attempts for every key to run out four times over.
			ops := 4*int(c.cap/c.cost(0, 0))*keys/workers + 100
			var admitted [keys]atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range ops {
						k := (i + w) % keys
						cost := c.cost(w, i/keys)
						if l.AllowKey(uint64(k), cost) {
							admitted[k].Add(cost)
						}
					}
				}()
			}
			wg.Wait()
			maxCost := c.cost(workers-1, 2)
			for k := range admitted {
				pr, ok := l.InspectKey(uint64(k))
				require.True(t, ok)
				require.Equal(t, admitted[k].Load(), c.units(pr), "key %d: admitted and counted differ", k)
				require.LessOrEqual(t, admitted[k].Load(), c.cap, "key %d", k)
				require.Greater(t, admitted[k].Load(), c.cap-maxCost, "key %d: every worker ends refused, so the key is full", k)
			}
		})
	}
	// With unit costs a frozen key admits exactly its capacity: what a serial run admits.
	for _, p := range []policy.Policy{
		policy.SlidingLog{Limit: 3000, Window: time.Hour}, policy.FixedWindow{Limit: 3000, Window: time.Hour},
		policy.TokenBucket{Rate: 1, Burst: 3000}, policy.GCRA{Rate: 1, Burst: 3000}, policy.LeakyBucket{Rate: 1, Capacity: 3000},
		policy.DualBucket{RequestsPerMin: 3000, TokensPerMin: 1 << 20},
	} {
		t.Run(p.ID()+"/unit", func(t *testing.T) {
			l, err := New(p, WithClock(clock.NewManual(start)))
			require.NoError(t, err)
			defer l.Close()
			var total atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 500 {
						if l.Allow("hot") {
							total.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, int64(3000), total.Load())
		})
	}
}

// admission is one admitted request as a stress worker saw it: the clock before and after the
// call bound the time it was decided at.
type admission struct {
	key          uint64
	t0, t1, cost int64
	reset        int64
}

// stressCase is a policy for the eviction stress test and the bound that the admissions of one
// key must satisfy.
type stressCase struct {
	p    policy.Policy
	jump int64 // the clock advances by up to this many ms per step
	// bound reports whether calls and units admitted within [a, a+span] are allowed.
	bound func(span, calls, units int64) bool
	// byWindow: check sums per window (Decision.ResetAt) instead of over intervals.
	byWindow int64
	// span is the longest interval checked; longer ones only loosen the bound.
	span int64
}

// TestPoliciesEvictionStress is TestEvictionStress for every policy: goroutines hit keys that keep
// dying (the clock jumps by up to 2.5 of the policy's time scales) while the sweeper evicts them
// every millisecond and tables are rebuilt. An admitted request written into a cell (or a log)
// that was being evicted would be lost, and the key would admit again: for every key, the units
// admitted over any interval must stay within what the policy allows.
//
// A request is decided at some time between the clock readings before and after its call
// (a state's own time is never later than the clock, and a revived key starts no earlier than its
// eviction), so an interval [a, b] is checked against the requests whose calls lie inside it.
func TestPoliciesEvictionStress(t *testing.T) {
	bucket := func(capacity, rate, unit int64) func(span, calls, units int64) bool {
		return func(span, _, units int64) bool { return units*unit <= capacity*unit+rate*span }
	}
	for _, c := range []stressCase{
		{p: policy.FixedWindow{Limit: 5, Window: 10 * time.Millisecond}, jump: 25, byWindow: 5},
		{p: policy.SlidingLog{Limit: 5, Window: 10 * time.Millisecond}, jump: 25, span: 9,
			bound: func(span, _, units int64) bool { return units <= 5 }},
		{p: policy.TokenBucket{Rate: 500, Burst: 5}, jump: 25, span: 40, bound: bucket(5, 500, 1000)},
		{p: policy.GCRA{Rate: 500, Burst: 5}, jump: 25, span: 40, bound: bucket(5, 500, 1000)},
		{p: policy.LeakyBucket{Rate: 500, Capacity: 5}, jump: 25, span: 40, bound: bucket(5, 500, 1000)},
		{p: policy.DualBucket{RequestsPerMin: 4, TokensPerMin: 6}, jump: 150_000, span: 240_000, bound: func(span, calls, units int64) bool {
			return calls*60_000 <= 4*60_000+4*span && units*60_000 <= 6*60_000+6*span
		}},
	} {
		t.Run(c.p.ID(), func(t *testing.T) { evictionStress(t, c) })
	}
}

func evictionStress(t *testing.T, c stressCase) {
	const keys, workers = 512, 6
	clk := clock.NewManual(start)
	l, err := New(c.p, WithClock(clk), WithSweepInterval(time.Millisecond), WithShards(4))
	require.NoError(t, err)
	defer l.Close()
	stop := make(chan struct{})
	var driver sync.WaitGroup
	driver.Add(1)
	go func() {
		defer driver.Done()
		r := rand.New(rand.NewPCG(1, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			clk.Advance(ms(r.Int64N(c.jump)))
			time.Sleep(50 * time.Microsecond)
		}
	}()
	seen := make([][]admission, workers)
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for i := 0; i < 5_000 || !done.Load(); i++ {
				if i%32 == 0 {
					runtime.Gosched() // leave the sweeper and the clock their share of a loaded machine
				}
				k := uint64(r.IntN(keys))
				cost := int64(1 + r.IntN(2))
				t0 := clk.Now()
				d := l.TakeKey(k, cost)
				if d.Allowed {
					seen[w] = append(seen[w], admission{k, t0, clk.Now(), cost, d.ResetAt.UnixMilli()})
				}
			}
		}()
	}
	// Run until the sweeper has evicted enough keys for the race to have been exercised; a machine
	// too slow to get there in half a minute fails below rather than passing vacuously.
	var st Stats
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if l.Stats(&st); st.Evicted >= 300 {
			break
		}
	}
	done.Store(true)
	wg.Wait()
	close(stop)
	driver.Wait()
	byKey := map[uint64][]admission{}
	for _, s := range seen {
		for _, a := range s {
			byKey[a.key] = append(byKey[a.key], a)
		}
	}
	checked := 0
	for k, as := range byKey {
		if c.byWindow > 0 {
			sums := map[int64]int64{}
			for _, a := range as {
				sums[a.reset] += a.cost
			}
			for reset, v := range sums {
				require.LessOrEqual(t, v, c.byWindow, "key %d, window ending %d", k, reset)
				checked++
			}
			continue
		}
		checked += checkIntervals(t, k, as, c.span, c.bound)
	}
	l.Stats(&st)
	require.GreaterOrEqual(t, st.Evicted, int64(300), "the sweeper must have evicted keys for the test to mean anything")
	t.Logf("admissions: %d keys, %d checks, keys evicted: %d", len(byKey), checked, st.Evicted)
}

// checkIntervals checks bound over every interval [a, b] no longer than maxSpan that starts at some
// admission's t0 and ends at some admission's t1, against the admissions whose calls lie inside it.
func checkIntervals(t *testing.T, key uint64, as []admission, maxSpan int64, bound func(span, calls, units int64) bool) int {
	slices.SortFunc(as, func(x, y admission) int { return int(x.t1 - y.t1) })
	checks := 0
	for _, first := range as {
		a := first.t0
		var calls, units int64
		// An admission that ended before a began before it too, so the scan starts at the first
		// that ends at a or later: the same checks, without a pass over every earlier admission
		// for every start (a key's admissions can number thousands on a slow machine).
		from, _ := slices.BinarySearchFunc(as, a, func(x admission, a int64) int { return cmp.Compare(x.t1, a) })
		for _, x := range as[from:] { // in order of t1: every prefix ends at b = x.t1
			if x.t1-a > maxSpan {
				break
			}
			if x.t0 < a {
				continue
			}
			calls++
			units += x.cost
			checks++
			if !bound(x.t1-a, calls, units) {
				require.Failf(t, "too many admitted", "key %d: %d calls, %d units within [%d, %d]", key, calls, units, a-start, x.t1-start)
			}
		}
	}
	return checks
}

// TestPoliciesAllocs: a decision for a tracked key allocates nothing, for every policy.
func TestPoliciesAllocs(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingLog{Limit: 1 << 10, Window: time.Second},
		policy.FixedWindow{Limit: 1 << 20, Window: time.Second},
		policy.TokenBucket{Rate: 1000, Burst: 1 << 20},
		policy.TokenBucket{Rate: 1, Burst: 1 << 20}, // two words
		policy.GCRA{Rate: 1000, Burst: 1 << 20},
		policy.LeakyBucket{Rate: 1000, Capacity: 1 << 20},
		policy.LeakyBucket{Rate: 1, Capacity: 1 << 20},
		policy.DualBucket{RequestsPerMin: 1 << 20, TokensPerMin: 1 << 20},
		policy.DualBucket{RequestsPerMin: 60, TokensPerMin: 1 << 20},
	} {
		l, err := New(p, WithClock(clock.NewManual(start)))
		require.NoError(t, err)
		l.Allow("existing")
		l.AllowKey(42, 1)
		for name, f := range map[string]func(){
			"Allow":    func() { l.Allow("existing") },
			"AllowN":   func() { l.AllowN("existing", 2) },
			"Take":     func() { _ = l.Take("existing", 1) },
			"Peek":     func() { _ = l.Peek("existing") },
			"Inspect":  func() { _, _ = l.Inspect("existing") },
			"AllowKey": func() { l.AllowKey(42, 1) },
			"TakeKey":  func() { _ = l.TakeKey(42, 1) },
			"refused":  func() { l.AllowN("existing", 1<<40) },
			"absent":   func() { _ = l.Peek("absent") },
		} {
			require.Zero(t, testing.AllocsPerRun(200, f), "%s %+v", name, p)
		}
		l.Close()
	}
}

// TestPoliciesEviction: each policy's keys are forgotten once their state is a new key's, and
// only then; the table shrinks back afterwards, and a forgotten key decides as a new one.
func TestPoliciesEviction(t *testing.T) {
	for _, c := range []struct {
		p    policy.Policy
		live int64 // ms after its last request that a key is certainly still live
		dead int64 // ms after which it is certainly dead
	}{
		{policy.SlidingLog{Limit: 3, Window: time.Second}, 999, 1000},
		{policy.FixedWindow{Limit: 3, Window: time.Second}, 999, 1000}, // start is a whole second
		{policy.TokenBucket{Rate: 3, Burst: 3}, 999, 1000},
		{policy.GCRA{Rate: 3, Burst: 3}, 999, 1000},
		{policy.LeakyBucket{Rate: 3, Capacity: 3}, 999, 1000},
		{policy.DualBucket{RequestsPerMin: 3, TokensPerMin: 3}, 59_999, 60_000},
	} {
		t.Run(c.p.ID(), func(t *testing.T) {
			clk := clock.NewManual(start)
			l, err := New(c.p, WithClock(clk), WithSweepInterval(time.Hour), WithShards(1))
			require.NoError(t, err)
			defer l.Close()
			sweep := func() { l.sweeper.Step(1 << 20) }
			for i := range uint64(2000) {
				require.True(t, l.AllowKey(i, 3))
			}
			var before Stats
			l.Stats(&before)
			clk.Set(start + c.live)
			sweep()
			require.Equal(t, 2000, l.Len(), "nothing is dead yet")
			require.False(t, l.AllowKey(7, 3), "a live key keeps its state through a sweep")
			clk.Set(start + c.dead)
			sweep()
			sweep()
			var after Stats
			l.Stats(&after)
			require.Equal(t, int64(0), after.Keys)
			require.Equal(t, int64(2000), after.Evicted)
			require.Less(t, after.TableBytes, before.TableBytes/100, "a table left empty is rebuilt small")
			_, tracked := l.InspectKey(1)
			require.False(t, tracked)
			require.True(t, l.AllowKey(1, 3), "an evicted key has its whole limit, as a new key")
		})
	}
}

// TestPoliciesKeyCap: at the cap a limiter refuses new keys, or evicts the stalest key below its
// limit, never the one at its limit. The sliding log is never evicted that way (its entries are
// freed only under their own lock), so at the cap it refuses new keys until some die.
func TestPoliciesKeyCap(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingLog{Limit: 3, Window: time.Second},
		policy.FixedWindow{Limit: 3, Window: time.Second},
		policy.TokenBucket{Rate: 1, Burst: 3},
		policy.GCRA{Rate: 1, Burst: 3},
		policy.LeakyBucket{Rate: 1, Capacity: 3},
		policy.DualBucket{RequestsPerMin: 3, TokensPerMin: 3},
	} {
		t.Run(p.ID(), func(t *testing.T) {
			clk := clock.NewManual(start)
			l, err := New(p, WithClock(clk), WithSweepInterval(time.Hour), WithShards(1), WithMaxKeys(10), WithAtCap(EvictStalest))
			require.NoError(t, err)
			defer l.Close()
			require.True(t, l.AllowN("abuser", 3))
			for i := range uint64(9) {
				clk.Set(start + 10 + int64(i))
				require.True(t, l.AllowKey(i, 1))
			}
			_, isLog := p.(policy.SlidingLog)
			for i := range uint64(50) {
				clk.Set(start + 100 + int64(i))
				d := l.TakeKey(1000+i, 1)
				if isLog {
					require.Equal(t, ReasonKeyCap, d.Reason, "new key %d", i)
				} else {
					require.True(t, d.Allowed, "new key %d", i)
				}
				require.LessOrEqual(t, l.Len(), 10)
			}
			d := l.Take("abuser", 1)
			require.False(t, d.Allowed, "the key at its limit was not evicted")
			require.Equal(t, ReasonLimited, d.Reason)
		})
	}
}

// TestGCRARefusedCostCreatesNoKey: GCRA refuses a cost above its burst before any lookup.
func TestGCRARefusedCostCreatesNoKey(t *testing.T) {
	l, err := New(policy.GCRA{Rate: 10, Burst: 5}, WithClock(clock.NewManual(start)))
	require.NoError(t, err)
	defer l.Close()
	d := l.Take("k", 6)
	require.False(t, d.Allowed)
	require.Equal(t, ReasonCostAboveLimit, d.Reason)
	require.Equal(t, int64(5), d.Limit)
	require.False(t, l.AllowN("k", 1<<62))
	require.Equal(t, 0, l.Len())
	require.True(t, l.AllowN("k", 5))
	require.Equal(t, 1, l.Len())
	require.False(t, l.Allow("k"))
	require.Equal(t, 1, l.Len())

	tb, err := New(policy.TokenBucket{Rate: 10, Burst: 5}, WithClock(clock.NewManual(start)))
	require.NoError(t, err)
	defer tb.Close()
	require.False(t, tb.AllowN("k", 6))
	require.Equal(t, 1, tb.Len(), "the token bucket tracks a key even for a cost it refuses")
}

func TestNewRejectsBadPolicies(t *testing.T) {
	for _, c := range []struct {
		p    policy.Policy
		want string
	}{
		{policy.SlidingLog{Limit: policy.MaxLogLimit + 1, Window: time.Second}, "SlidingLog.Limit = 10001"},
		{policy.FixedWindow{Limit: 0, Window: time.Second}, "FixedWindow.Limit = 0"},
		{policy.TokenBucket{Rate: 0, Burst: 1}, "TokenBucket.Rate = 0"},
		{policy.GCRA{Rate: 1, Burst: 1 << 32}, "GCRA.Burst = 4294967296"},
		{policy.LeakyBucket{Rate: 1, Capacity: -1}, "LeakyBucket.Capacity = -1"},
		{policy.DualBucket{RequestsPerMin: 1, TokensPerMin: 0}, "DualBucket.TokensPerMin = 0"},
	} {
		l, err := New(c.p)
		require.Nil(t, l)
		require.ErrorContains(t, err, c.want)
	}
}

// The buckets' waits for a cost several units short, by docs/policies.md's general rules, worked
// by hand: the dual bucket waits for every missing token, not one.
func TestBucketWaitsForEveryMissingUnit(t *testing.T) {
	clk := clock.NewManual(1_000_000)
	dual, err := New(policy.DualBucket{RequestsPerMin: 100, TokensPerMin: 600}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer dual.Close()
	if d := dual.Take("k", 600); !d.Allowed {
		t.Fatalf("the first 600 tokens were refused: %+v", d)
	}
	// Requests: 99 left, none needed. Tokens: 0 left, credit 0: ceilDiv(60 × 60000, 600) = 6000.
	if d := dual.Take("k", 60); d.Allowed || d.RetryAfter != 6*time.Second {
		t.Fatalf("60 tokens on an empty bucket: %+v, want a refusal with RetryAfter 6s", d)
	}
	leaky, err := New(policy.LeakyBucket{Rate: 3, Capacity: 10}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer leaky.Close()
	if d := leaky.Take("k", 9); !d.Allowed {
		t.Fatalf("9 of 10 were refused: %+v", d)
	}
	clk.Advance(100 * time.Millisecond) // drains 0.3 of a unit: level 9, credit 300
	// ceilDiv((9 + 4 − 10) × 1000 − 300, 3) = ceilDiv(2700, 3) = 900.
	if d := leaky.Take("k", 4); d.Allowed || d.RetryAfter != 900*time.Millisecond {
		t.Fatalf("4 more at level 9 of 10: %+v, want a refusal with RetryAfter 900ms", d)
	}
}
