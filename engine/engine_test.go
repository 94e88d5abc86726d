package engine

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start is an epoch time in 2026, above 2^40 ms, as a real clock would read.
const start = int64(1_764_000_000_000)

func newSC(t testing.TB, limit int64, window time.Duration, opts ...Option) (*Limiter, *clock.Clock) {
	t.Helper()
	clk := clock.NewManual(start)
	l, err := New(policy.SlidingCounter{Limit: limit, Window: window}, append([]Option{WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, clk
}

func TestNewRejectsBadConfiguration(t *testing.T) {
	for _, c := range []struct {
		name string
		p    policy.Policy
		opts []Option
		want string
	}{
		{"nil policy", nil, nil, "nil policy"},
		{"nil pointer policy", (*policy.SlidingCounter)(nil), nil, "nil policy"},
		{"nil pointer dual bucket", (*policy.DualBucket)(nil), nil, "nil policy"},
		{"pointer policy, invalid", &policy.SlidingCounter{Limit: 0, Window: time.Second}, nil, "SlidingCounter.Limit = 0"},
		{"limit 0", policy.SlidingCounter{Limit: 0, Window: time.Second}, nil, "SlidingCounter.Limit = 0"},
		{"limit 2^32", policy.SlidingCounter{Limit: 1 << 32, Window: time.Second}, nil, "SlidingCounter.Limit = 4294967296"},
		{"negative limit", policy.SlidingCounter{Limit: -5, Window: time.Second}, nil, "SlidingCounter.Limit = -5"},
		{"window 0", policy.SlidingCounter{Limit: 1, Window: 0}, nil, "SlidingCounter.Window = 0s"},
		{"window 1.5ms", policy.SlidingCounter{Limit: 1, Window: 1500 * time.Microsecond}, nil, "SlidingCounter.Window = 1.5ms is not a whole number"},
		{"window too long", policy.SlidingCounter{Limit: 1, Window: policy.MaxWindow + time.Millisecond}, nil, "SlidingCounter.Window = "},
		{"shards 3", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithShards(3)}, "WithShards(3)"},
		{"shards 0", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithShards(0)}, "WithShards(0)"},
		{"max keys 0", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithMaxKeys(0)}, "WithMaxKeys(0)"},
		{"nil clock", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithClock(nil)}, "WithClock(nil)"},
		{"sweep interval", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithSweepInterval(0)}, "WithSweepInterval(0s)"},
		{"at cap", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithAtCap(9)}, "WithAtCap(9)"},
		{"expected keys negative", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithExpectedKeys(-1)}, fmt.Sprintf("WithExpectedKeys(-1): must be in [0, %d]", uint64(MaxExpectedKeys))},
		{"expected keys above the cap", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithMaxKeys(1000), WithExpectedKeys(1001)}, "WithExpectedKeys(1001) is above the key cap, 1000"},
		{"expected keys above the default cap", policy.SlidingCounter{Limit: 1, Window: time.Second}, []Option{WithExpectedKeys(DefaultMaxKeys + 1)}, "is above the key cap, 67108864"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.p, c.opts...)
			require.Nil(t, l)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestNewTakesPolicyPointers: a pointer to a policy (it satisfies policy.Policy too) makes the
// limiter its value makes, and reports the value as its policy.
func TestNewTakesPolicyPointers(t *testing.T) {
	for _, p := range []policy.Policy{
		&policy.SlidingCounter{Limit: 2, Window: time.Second}, &policy.SlidingLog{Limit: 2, Window: time.Second},
		&policy.FixedWindow{Limit: 2, Window: time.Second}, &policy.TokenBucket{Rate: 1, Burst: 2},
		&policy.GCRA{Rate: 1, Burst: 2}, &policy.LeakyBucket{Rate: 1, Capacity: 2},
		&policy.DualBucket{RequestsPerMin: 2, TokensPerMin: 2},
	} {
		l, err := New(p, WithClock(clock.NewManual(start)))
		require.NoError(t, err, "%T", p)
		require.Equal(t, reflect.ValueOf(p).Elem().Interface(), l.Policy(), "%T", p)
		require.True(t, l.Allow("k"), "%T", p)
		require.True(t, l.Allow("k"), "%T", p)
		require.False(t, l.Allow("k"), "%T: a third unit within the limit of 2", p)
		l.Close()
	}
}

func TestBasicWindow(t *testing.T) {
	l, clk := newSC(t, 5, time.Second)
	clk.Set(start + 250) // 250 ms into a window (start is a whole number of seconds)
	for i := range 5 {
		d := l.Take("a", 1)
		require.True(t, d.Allowed, "request %d", i)
		require.Equal(t, int64(4-i), d.Remaining)
		require.Equal(t, ReasonOK, d.Reason)
		require.Equal(t, time.UnixMilli(start+1000), d.ResetAt)
	}
	d := l.Take("a", 1)
	require.False(t, d.Allowed)
	require.Equal(t, ReasonLimited, d.Reason)
	// The current window alone is full: wait to the edge (750 ms) plus 1 ms.
	require.Equal(t, 751*time.Millisecond, d.RetryAfter)
	require.Equal(t, 1, l.Len())

	// 1 ms into the next window, 5*999/1000 = 4.995 floors to 4: one request fits.
	clk.Set(start + 1001)
	require.True(t, l.Allow("a"))
	require.False(t, l.Allow("a"))
	pr, ok := l.Inspect("a")
	require.True(t, ok)
	require.Equal(t, int64(5), pr.Estimate)
}

func TestCostRules(t *testing.T) {
	l, _ := newSC(t, 10, time.Second)
	d := l.Take("k", -1)
	require.False(t, d.Allowed)
	require.Equal(t, ReasonNegativeCost, d.Reason)
	require.Equal(t, 0, l.Len(), "a negative cost must not create the key")

	d = l.Take("k", 11)
	require.False(t, d.Allowed)
	require.Equal(t, ReasonCostAboveLimit, d.Reason)
	require.Equal(t, time.Duration(0), d.RetryAfter)
	require.Equal(t, 1, l.Len(), "a cost above the limit still tracks the key, as the registry does")
	pr, _ := l.Inspect("k")
	require.Equal(t, int64(0), pr.Estimate)

	require.True(t, l.AllowN("k", 10), "a cost equal to what remains is admitted (ties admit)")
	require.False(t, l.AllowN("k", 1))
	d = l.Take("k", 0)
	require.True(t, d.Allowed, "cost 0 is a query that is always admitted")
	require.Equal(t, int64(0), d.Remaining)
	pr, _ = l.Inspect("k")
	require.Equal(t, int64(10), pr.Estimate, "cost 0 consumes nothing")
}

func TestPeekCreatesNothing(t *testing.T) {
	l, _ := newSC(t, 3, time.Second)
	d := l.Peek("ghost")
	require.True(t, d.Allowed)
	require.Equal(t, int64(3), d.Remaining)
	_, ok := l.Inspect("ghost")
	require.False(t, ok)
	require.Equal(t, 0, l.Len())
	require.Equal(t, 0, l.Len())
	for range 3 {
		l.Allow("k")
	}
	d = l.Peek("k")
	require.False(t, d.Allowed)
	require.Equal(t, ReasonLimited, d.Reason)
	require.Equal(t, int64(0), d.Remaining)
	require.Positive(t, d.RetryAfter)
}

// TestEdgeBurst: limit requests just before a window edge and limit just after admit exactly limit
// in all, because just after the edge the previous window still counts almost in full.
func TestEdgeBurst(t *testing.T) {
	for _, limit := range []int64{1, 7, 100, 1000} {
		l, clk := newSC(t, limit, time.Second)
		clk.Set(start + 999)
		admitted := 0
		for range limit {
			if l.Allow("k") {
				admitted++
			}
		}
		clk.Set(start + 1000)
		for range limit {
			if l.Allow("k") {
				admitted++
			}
		}
		require.Equal(t, int(limit), admitted, "limit %d", limit)
	}
}

// TestRefusedChangesNothing: a refused request leaves the estimate and every later decision as
// they were.
func TestRefusedChangesNothing(t *testing.T) {
	l, clk := newSC(t, 10, time.Second)
	require.True(t, l.AllowN("k", 7))
	clk.Set(start + 1300)
	require.True(t, l.AllowN("k", 2))
	before, _ := l.Inspect("k")
	for _, n := range []int64{5, 10, 11, 1 << 40} {
		require.False(t, l.AllowN("k", n))
		after, _ := l.Inspect("k")
		require.Equal(t, before, after, "after refusing %d", n)
	}
}

// TestModelEquivalence drives the engine and the contract's model with the same random operations,
// including multi-window jumps and the extremes of limit and window, and requires every decision,
// retry-after, reset time and estimate to agree.
func TestModelEquivalence(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.SampledFrom([]int64{1, 2, 3, 5, 100, 1<<21 - 1, 1 << 21, math.MaxUint32 - 1, math.MaxUint32}).Draw(rt, "limit")
		window := rapid.SampledFrom([]int64{1, 2, 7, 1000, 60_000, 2_592_000_000, 1 << 31, 1 << 32}).Draw(rt, "windowMs")
		shards := rapid.SampledFrom([]int{1, 4, 256}).Draw(rt, "shards")
		clk := clock.NewManual(rapid.Int64Range(0, 1<<42).Draw(rt, "start"))
		l, err := New(policy.SlidingCounter{Limit: limit, Window: time.Duration(window) * time.Millisecond},
			WithClock(clk), WithShards(shards), WithEviction(false))
		require.NoError(rt, err)
		defer l.Close()
		m := newSCModel(limit, window)
		keys := rapid.IntRange(1, 5).Draw(rt, "keys")
		for i := range rapid.IntRange(1, 200).Draw(rt, "ops") {
			switch rapid.IntRange(0, 9).Draw(rt, "step") {
			case 0: // multi-window jump
				clk.Advance(time.Duration(rapid.Int64Range(0, 5*window).Draw(rt, "jump")) * time.Millisecond)
			case 1, 2:
				clk.Advance(time.Duration(rapid.Int64Range(0, window/3+1).Draw(rt, "tick")) * time.Millisecond)
			}
			now := clk.Now()
			key := uint64(rapid.IntRange(0, keys-1).Draw(rt, "key"))
			switch rapid.IntRange(0, 3).Draw(rt, "call") {
			case 0, 1:
				var cost int64
				switch rapid.IntRange(0, 4).Draw(rt, "costKind") {
				case 0:
					cost = 0
				case 1:
					cost = 1
				case 2:
					cost = limit
				case 3:
					cost = limit + 1
				default:
					cost = rapid.Int64Range(0, limit).Draw(rt, "cost")
				}
				est := m.estimateOf(key, now)
				want := m.allow(key, cost, now)
				d := l.TakeKey(key, cost)
				require.Equal(rt, want, d.Allowed, "op %d allow(%d, %d, %d)", i, key, cost, now)
				require.Equal(rt, time.UnixMilli(m.resetAt(now)), d.ResetAt, "op %d ResetAt", i)
				if want {
					require.Equal(rt, max(limit-est-cost, 0), d.Remaining, "op %d Remaining", i)
				} else {
					require.Equal(rt, max(limit-est, 0), d.Remaining, "op %d Remaining", i)
				}
				if !want && cost == 1 {
					require.Equal(rt, m.retryAfter(key, now), d.RetryAfter.Milliseconds(), "op %d refused RetryAfter", i)
				}
			case 2:
				d := l.PeekKey(key)
				require.Equal(rt, m.retryAfter(key, now), d.RetryAfter.Milliseconds(), "op %d retryAfter(%d, %d)", i, key, now)
				require.Equal(rt, m.estimateOf(key, now)+1 <= limit, d.Allowed, "op %d Peek.Allowed", i)
			case 3:
				pr, _ := l.InspectKey(key)
				require.Equal(rt, m.estimateOf(key, now), pr.Estimate, "op %d estimateOf(%d, %d)", i, key, now)
			}
			require.Equal(rt, len(m.keys), l.Len(), "op %d stateSize", i)
		}
	})
}

// TestRetryAfterIsHonoured: with one key and no other traffic, a request of the same cost made
// exactly RetryAfter later is admitted, whatever state the key is in.
func TestRetryAfterIsHonoured(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.SampledFrom([]int64{1, 3, 10, 1000, 1<<21 - 1, math.MaxUint32}).Draw(rt, "limit")
		window := rapid.SampledFrom([]int64{1, 10, 1000, 2_592_000_000, 1 << 32}).Draw(rt, "windowMs")
		clk := clock.NewManual(start)
		l, err := New(policy.SlidingCounter{Limit: limit, Window: time.Duration(window) * time.Millisecond},
			WithClock(clk), WithEviction(false))
		require.NoError(rt, err)
		defer l.Close()
		for range rapid.IntRange(0, 6).Draw(rt, "fills") {
			l.AllowN("k", rapid.Int64Range(0, limit).Draw(rt, "fill"))
			clk.Advance(time.Duration(rapid.Int64Range(0, window).Draw(rt, "gap")) * time.Millisecond)
		}
		cost := rapid.Int64Range(1, limit).Draw(rt, "cost")
		d := l.Take("k", cost)
		if d.Allowed {
			return
		}
		require.Positive(rt, d.RetryAfter)
		clk.Advance(d.RetryAfter)
		require.True(rt, l.AllowN("k", cost), "cost %d refused %v after a RetryAfter of %v", cost, d, d.RetryAfter)
	})
}

// TestExtremes pins the arithmetic at the largest limit and window, with times above 2^41 ms.
func TestExtremes(t *testing.T) {
	const limit = math.MaxUint32
	w := int64(1 << 32)
	l, clk := newSC(t, limit, policy.MaxWindow)
	base := (start/w + 1) * w // a window edge above 2^41
	clk.Set(base + w - 1)
	require.True(t, l.AllowN("k", limit))
	require.False(t, l.Allow("k"))
	// One ms into the next window the previous count is carried as floor(L*(W-1)/W) = L-1
	// (L < W), leaving exactly one unit.
	clk.Set(base + w + 1)
	pr, _ := l.Inspect("k")
	require.Equal(t, int64(limit-1), pr.Estimate)
	require.True(t, l.Allow("k"))
	d := l.Take("k", 1)
	require.False(t, d.Allowed)
	// need = L - 1 - 1 = L-2, excess = L - (L-2) - 1 = 1, target = floor(W*1/L) + 1 = 2 (W/L = 1.0000000002),
	// elapsed = 1: wait 1 ms.
	require.Equal(t, time.Millisecond, d.RetryAfter)
	clk.Advance(time.Millisecond)
	require.True(t, l.Allow("k"))
}

// TestHorizon: a one-word cell keeps its window index modulo 2^k. A key left alone for exactly
// 2^k windows would read as current, and 2^k+1 as previous, if nothing swept it; a decision that
// finds its shard's sweep overdue sweeps first, so the key reads as new.
func TestHorizon(t *testing.T) {
	const limit = 1<<21 - 1 // 21 bits per count leave k = 20 bits of window index
	for _, evict := range []bool{false, true} {
		for _, gap := range []int64{1 << 20, 1<<20 + 1, 1 << 19, 3 << 20} {
			t.Run(fmt.Sprintf("evict=%v/gap=%d", evict, gap), func(t *testing.T) {
				l, clk := newSC(t, limit, time.Millisecond, WithEviction(evict), WithShards(1))
				require.True(t, l.AllowN("k", limit))
				require.True(t, l.AllowN("other", 5))
				clk.Advance(time.Duration(gap) * time.Millisecond)
				pr, _ := l.Inspect("k")
				require.Equal(t, int64(0), pr.Estimate)
				require.True(t, l.AllowN("k", limit), "after %d windows the key is new", gap)
				require.False(t, l.Allow("k"))
			})
		}
	}
}

func TestAllocs(t *testing.T) {
	l, _ := newSC(t, 1<<20, time.Second)
	l.Allow("existing")
	l.AllowKey(42, 1)
	for name, f := range map[string]func(){
		"Allow":      func() { l.Allow("existing") },
		"AllowN":     func() { l.AllowN("existing", 2) },
		"Take":       func() { _ = l.Take("existing", 1) },
		"Peek":       func() { _ = l.Peek("existing") },
		"Inspect":    func() { _, _ = l.Inspect("existing") },
		"AllowKey":   func() { l.AllowKey(42, 1) },
		"TakeKey":    func() { _ = l.TakeKey(42, 1) },
		"PeekKey":    func() { _ = l.PeekKey(42) },
		"refused":    func() { l.AllowN("existing", 1<<21) },
		"negative":   func() { l.AllowN("existing", -1) },
		"PeekAbsent": func() { _ = l.Peek("absent") },
	} {
		require.Zero(t, testing.AllocsPerRun(1000, f), name)
	}
}

// TestConcurrentExactness: with the clock frozen inside one window, goroutines hammering the same
// keys admit exactly limit units per key in total, never more and never fewer.
func TestConcurrentExactness(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int64
		keys  int
	}{{"one key", 1000, 1}, {"many keys", 50, 200}, {"two-word cells", 1<<21 + 7, 1}} {
		t.Run(c.name, func(t *testing.T) {
			l, _ := newSC(t, c.limit, time.Minute, WithShards(4))
			const workers = 8
			admitted := make([]atomic.Int64, c.keys)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						k := (i + w) % c.keys
						cost := int64(1 + (i+w)%3)
						if c.limit > 1<<20 {
							cost = 4096 + int64(w)
						}
						if l.AllowKey(uint64(k), cost) {
							admitted[k].Add(cost)
						}
						if i > 4*int(c.limit)*c.keys/workers+100 {
							return
						}
					}
				}()
			}
			wg.Wait()
			for k := range admitted {
				// Every key is driven far past its limit with costs of 1 to 3 (or ~4096), so all
				// but the last few units are taken; exactness is about never exceeding it and
				// never losing a count, which the estimate shows.
				pr, _ := l.InspectKey(uint64(k))
				require.Equal(t, admitted[k].Load(), pr.Estimate, "key %d: admitted and counted differ", k)
				require.LessOrEqual(t, admitted[k].Load(), c.limit, "key %d", k)
				require.Greater(t, admitted[k].Load(), c.limit-4097, "key %d", k)
			}
		})
	}
	t.Run("unit costs fill exactly", func(t *testing.T) {
		l, _ := newSC(t, 10_000, time.Minute)
		var total atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3000 {
					if l.Allow("hot") {
						total.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int64(10_000), total.Load())
	})
}

// TestConcurrentInserts: goroutines inserting disjoint keys while the tables grow (and rebuild)
// under them lose neither keys nor counts.
func TestConcurrentInserts(t *testing.T) {
	l, _ := newSC(t, 3, time.Minute, WithShards(2), WithEviction(false))
	const workers, perWorker = 8, 4000
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				key := uint64(w*perWorker + i)
				for range 4 {
					if l.AllowKey(key, 1) {
						admitted.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, workers*perWorker, l.Len())
	require.Equal(t, int64(3*workers*perWorker), admitted.Load())
	for k := range uint64(workers * perWorker) {
		pr, ok := l.InspectKey(k)
		require.True(t, ok)
		require.Equal(t, int64(3), pr.Estimate, "key %d", k)
	}
}

func TestClose(t *testing.T) {
	clk := clock.NewManual(start)
	l, err := New(policy.SlidingCounter{Limit: 5, Window: time.Second}, WithClock(clk))
	require.NoError(t, err)
	require.True(t, l.Allow("k"))
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "Close is idempotent")
	d := l.Take("k", 1)
	require.False(t, d.Allowed)
	require.Equal(t, ReasonClosed, d.Reason)

	// The default clock is the shared coarse clock; closing the last limiter stops it.
	l2, err := New(policy.SlidingCounter{Limit: 5, Window: time.Second})
	require.NoError(t, err)
	l3, err := New(policy.SlidingCounter{Limit: 5, Window: time.Second})
	require.NoError(t, err)
	require.True(t, l2.Allow("k"))
	require.NoError(t, l2.Close())
	require.True(t, l3.Allow("k"), "closing one limiter leaves the shared clock to the other")
	require.NoError(t, l3.Close())
	goleak.VerifyNone(t)
}

func TestReasonString(t *testing.T) {
	require.Equal(t, "limited", ReasonLimited.String())
	require.Equal(t, "key cap reached", ReasonKeyCap.String())
	require.Equal(t, "unknown", Reason(200).String())
	require.True(t, strings.Contains(ReasonCostAboveLimit.String(), "limit"))
}

// TestCloseComesFirst: after Close every call reports the closed limiter, whatever its cost or
// per-key limit: a negative cost, an invalid limit and a cancelled ctx do not take precedence.
func TestCloseComesFirst(t *testing.T) {
	l, _ := newSC(t, 5, time.Second, WithMaxLimit(100))
	require.NoError(t, l.Close())
	for name, d := range map[string]Decision{
		"Take(-1)":                 l.Take("k", -1),
		"TakeKey(-1)":              l.TakeKey(1, -1),
		"Take(MaxInt64)":           l.Take("k", math.MaxInt64),
		"TakeWithLimit(1, 0)":      l.TakeWithLimit("k", 1, 0),
		"TakeWithLimit(1, 101)":    l.TakeWithLimit("k", 1, 101),
		"TakeKeyWithLimit(-1, -1)": l.TakeKeyWithLimit(1, -1, -1),
		"TakeWithLimit(-1, 50)":    l.TakeWithLimit("k", -1, 50),
		"TakeWithLimit(1, 50)":     l.TakeWithLimit("k", 1, 50),
		"Peek":                     l.Peek("k"),
	} {
		require.Equal(t, ReasonClosed, d.Reason, name)
		require.False(t, d.Allowed, name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, l.Wait(ctx, "k", 1), ErrClosed, "Close is checked before ctx")
	require.ErrorIs(t, l.Wait(context.Background(), "k", -1), ErrClosed)
	_, err := l.AsLimiter().Take(context.Background(), "k", -1)
	require.ErrorIs(t, err, ErrClosed)
}

// TestTakeWithLimitRefusalsReportTheLimit: a valid per-key limit is the Decision's Limit even
// when the request is refused before the policy runs; an invalid one reports the policy's.
func TestTakeWithLimitRefusalsReportTheLimit(t *testing.T) {
	l, _ := newSC(t, 100, time.Minute, WithMaxLimit(1000), WithMaxKeys(1))
	require.True(t, l.Allow("other")) // the cap is reached: a new key is refused
	for _, c := range []struct {
		name   string
		d      Decision
		reason Reason
		limit  int64
	}{
		{"negative cost", l.TakeWithLimit("t", -1, 500), ReasonNegativeCost, 500},
		{"key cap", l.TakeWithLimit("t", 1, 500), ReasonKeyCap, 500},
		{"key cap, integer key", l.TakeKeyWithLimit(7, 1, 500), ReasonKeyCap, 500},
		{"cost above the limit, refused by the policy", l.TakeWithLimit("other", math.MaxInt64, 500), ReasonCostAboveLimit, 500},
		{"policy's decision", l.TakeWithLimit("other", 1, 500), ReasonOK, 500},
		{"invalid limit", l.TakeWithLimit("other", 1, 1001), ReasonInvalidLimit, 100},
	} {
		require.Equal(t, c.reason, c.d.Reason, c.name)
		require.Equal(t, c.limit, c.d.Limit, c.name)
	}
	require.NoError(t, l.Close())
	d := l.TakeWithLimit("other", 1, 500)
	require.Equal(t, ReasonClosed, d.Reason)
	require.Equal(t, int64(500), d.Limit)
}

// TestRacingFirstRequests: goroutines released together on a key none of them has seen all race
// to insert it. One insert decides its own request in the new key's state (shard.AdmitFrom); the
// others find the key live and decide on its cell. Every admitted request must be counted, and no
// more than the limit admitted, for both cell widths and for a first request above the limit.
func TestRacingFirstRequests(t *testing.T) {
	for _, c := range []struct {
		name        string
		limit, cost int64
	}{{"one word", 3, 1}, {"two words", 1<<21 + 2, 1 << 19}, {"above the limit", 3, 4}} {
		t.Run(c.name, func(t *testing.T) {
			l, _ := newSC(t, c.limit, time.Minute, WithShards(2))
			const workers, keys = 6, 300
			for k := range uint64(keys) {
				var admitted atomic.Int64
				var ready, wg sync.WaitGroup
				ready.Add(1)
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ready.Wait()
						if l.AllowKey(k, c.cost) {
							admitted.Add(c.cost)
						}
					}()
				}
				ready.Done()
				wg.Wait()
				want := min(c.limit/c.cost, workers) * c.cost
				require.Equal(t, want, admitted.Load(), "key %d", k)
				pr, ok := l.InspectKey(k)
				require.True(t, ok, "key %d is tracked", k)
				require.Equal(t, want, pr.Estimate, "key %d: admitted and counted differ", k)
			}
		})
	}
}
