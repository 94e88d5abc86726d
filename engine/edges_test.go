package engine

import (
	"math"
	"strconv"
	"sync"
	satomic "sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// TestAllocsRuntimeKeys: keys that exist only at run time (converted from bytes, built in a stack
// buffer, or concatenated) cost no allocation either, under both hashes. A constant key proves
// nothing here: the compiler places it in read-only memory, so it never escapes however the hash
// is called.
func TestAllocsRuntimeKeys(t *testing.T) {
	for _, seeded := range []bool{false, true} {
		t.Run("seeded="+strconv.FormatBool(seeded), func(t *testing.T) {
			var opts []Option
			if seeded {
				opts = append(opts, WithSeed(7))
			}
			l, _ := newSC(t, 1<<20, time.Second, opts...)
			b := []byte("10.0.0." + strconv.Itoa(len(t.Name())) + ":443")
			l.Allow(string(b))
			d := l.Take(string(b), 1)
			m, err := All(l)
			require.NoError(t, err)
			stack := func() {
				var buf [48]byte
				n := copy(buf[:], b)
				l.Allow(unsafe.String(&buf[0], n))
			}
			for name, f := range map[string]func(){
				"Allow":         func() { l.Allow(string(b)) },
				"AllowN":        func() { l.AllowN(string(b), 1) },
				"Take":          func() { _ = l.Take(string(b), 1) },
				"Peek":          func() { _ = l.Peek(string(b)) },
				"Inspect":       func() { _, _ = l.Inspect(string(b)) },
				"TakeWithLimit": func() { _ = l.TakeWithLimit(string(b), 1, 10) },
				"Refund":        func() { _ = l.Refund(string(b), 1, d) },
				"Multi.Take":    func() { _ = m.Take(string(b), 1) },
				"stack buffer":  stack,
				"absent":        func() { _ = l.Peek(string(b[:3])) },
			} {
				require.Zero(t, testing.AllocsPerRun(1000, f), name)
			}
		})
	}
}

// TestHashWidth: string keys hash to 64 bits on every platform (CI runs this under GOARCH=386
// too), so 300,000 distinct keys are 300,000 tracked keys; with 32-bit hashes about ten pairs of
// them would merge (n^2 / 2^33).
func TestHashWidth(t *testing.T) {
	for _, seeded := range []bool{false, true} {
		t.Run("seeded="+strconv.FormatBool(seeded), func(t *testing.T) {
			opts := []Option{WithEviction(false)}
			if seeded {
				opts = append(opts, WithSeed(1))
			}
			l, _ := newSC(t, 10, time.Second, opts...)
			const n = 300_000
			b := make([]byte, 0, 32)
			for i := range n {
				b = strconv.AppendInt(append(append(b[:0], "10."...), strconv.Itoa(i>>16)+"."...), int64(i>>8&255), 10)
				b = strconv.AppendInt(append(b, '.'), int64(i&255), 10)
				b = strconv.AppendInt(append(b, ':'), int64(1024+i%50000), 10)
				require.True(t, l.Allow(string(b)))
			}
			require.Equal(t, n, l.Len(), "distinct keys merged by their hash")
		})
	}
}

// TestTopOfTimeRange: a manual clock given 2^62 or later reads 2^62-1, the last time a cell can
// store, so every policy still decides there, promptly and sensibly; before the clamp the token
// bucket's stored time set a flag bit and Take never returned.
func TestTopOfTimeRange(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingCounter{Limit: 1<<32 - 1, Window: policy.MaxWindow},
		policy.SlidingCounter{Limit: 10, Window: time.Second},
		policy.SlidingLog{Limit: 3, Window: time.Second},
		policy.FixedWindow{Limit: 1<<32 - 1, Window: time.Second},
		policy.TokenBucket{Rate: 1<<32 - 1, Burst: 1<<32 - 1},
		policy.TokenBucket{Rate: 1, Burst: 1<<32 - 1},
		policy.GCRA{Rate: 1<<32 - 1, Burst: 1<<32 - 1},
		policy.LeakyBucket{Rate: 1, Capacity: 1<<32 - 1},
		policy.DualBucket{RequestsPerMin: 1<<32 - 1, TokensPerMin: 1<<32 - 1},
	} {
		clk := clock.NewManual(1 << 62)
		l, err := New(p, WithClock(clk))
		require.NoError(t, err)
		done := make(chan Decision)
		go func() {
			d := l.Take("k", 1)
			clk.Set(math.MaxInt64)
			l.Take("k", 1)
			done <- d
		}()
		select {
		case d := <-done:
			require.True(t, d.Allowed, "%+v", p)
			require.False(t, d.ResetAt.Before(time.UnixMilli(clock.MaxMs)), "%+v: ResetAt %v", p, d.ResetAt)
		case <-time.After(10 * time.Second):
			t.Fatalf("%+v: Take at 2^62 did not return", p)
		}
		l.Close()
	}
}

// TestRefundBoundedByCounted: a refund gives back no more than its decision counted, for every
// policy that refunds, however many units it asks for; a refused decision and a peek count
// nothing and give nothing back.
func TestRefundBoundedByCounted(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingCounter{Limit: 10, Window: time.Second},
		policy.FixedWindow{Limit: 10, Window: time.Second},
		policy.TokenBucket{Rate: 1000, Burst: 10},
		policy.GCRA{Rate: 1000, Burst: 10},
		policy.LeakyBucket{Rate: 1000, Capacity: 10},
	} {
		l, err := New(p, WithClock(clock.NewManual(start)))
		require.NoError(t, err)
		require.True(t, l.Take("k", 9).Allowed)
		d := l.Take("k", 1)
		require.True(t, d.Allowed)
		require.Equal(t, int64(1), d.Counted)
		require.Equal(t, int64(1), l.Refund("k", 10, d), "%s: the decision counted 1", p.ID())
		refused := l.Take("k", 5)
		require.False(t, refused.Allowed)
		require.Zero(t, refused.Counted)
		require.Zero(t, l.Refund("k", 5, refused))
		peek := l.Peek("k")
		require.Zero(t, peek.Counted)
		require.Zero(t, l.Refund("k", 5, peek))
		require.Zero(t, l.TakeKey(1, 0).Counted, "a query counts nothing")
		l.Close()
	}
}

// abuserRounds runs the flood of the EvictStalest tests: each round the abuser asks for 9 units
// (through take), then four new keys arrive; rounds half a minute apart, within one hour. It returns
// the units the abuser was admitted.
func abuserRounds(t *testing.T, seed uint64, take func(l *Limiter) bool) int {
	clk := clock.NewManual(start)
	l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Hour}, WithClock(clk), WithSeed(seed),
		WithMaxKeys(4), WithAtCap(EvictStalest), WithSweepInterval(time.Hour))
	require.NoError(t, err)
	defer l.Close()
	admitted, fresh := 0, uint64(0)
	for range 50 {
		for range 9 {
			if take(l) {
				admitted++
			}
		}
		for range 4 {
			fresh++
			l.AllowKey(fresh, 1)
		}
		clk.Advance(time.Minute / 2)
	}
	return admitted
}

// TestEvictStalestNeverResetsAKeyUsingItsLimit: flooding new keys does not reset a key that holds
// half its limit or more, judged against its own per-key limit where it has one.
func TestEvictStalestNeverResetsAKeyUsingItsLimit(t *testing.T) {
	for seed := range uint64(20) {
		require.LessOrEqual(t, abuserRounds(t, seed, func(l *Limiter) bool { return l.Allow("abuser") }), 10, "seed %d", seed)
		require.LessOrEqual(t, abuserRounds(t, seed, func(l *Limiter) bool { return l.TakeWithLimit("abuser", 1, 5).Allowed }), 5,
			"seed %d: a per-key limit of 5", seed)
	}
}

// TestRefundAfterEvictionAtCap pins what Refund's doc says of a key evicted at the cap after the
// decision and tracked again since: the refund comes out of the new entry's units in the
// decision's window, at most d.Counted, as nothing tells the two entries apart.
func TestRefundAfterEvictionAtCap(t *testing.T) {
	for _, tc := range []struct{ again, want, left int64 }{
		{2, 2, 10}, // the new entry holds 2 of d's 3: all 2 come back
		{5, 3, 8},  // it holds 5: d.Counted, 3, come back
	} {
		clk := clock.NewManual(10_000)
		l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Hour}, WithClock(clk), WithShards(1),
			WithEviction(false), WithMaxKeys(1), WithAtCap(EvictStalest))
		require.NoError(t, err)
		d := l.Take("k", 3)
		require.True(t, d.Allowed)
		require.True(t, l.Take("x", 1).Allowed)        // evicts k, holding 3 of 10
		require.True(t, l.Take("k", tc.again).Allowed) // evicts x: k is tracked anew
		require.Equal(t, tc.want, l.Refund("k", 3, d), "again %d", tc.again)
		require.Equal(t, tc.left, l.Peek("k").Remaining, "again %d", tc.again)
		require.NoError(t, l.Close())
	}
}

// TestEvictStalestJudgesPerKeyLimits: a key using all of a per-key limit below the policy's is not
// evicted at the cap, for either policy with per-key limits; the fixed window used to judge it
// against the policy's limit, evict it, and then admit it past its own.
func TestEvictStalestJudgesPerKeyLimits(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.FixedWindow{Limit: 10, Window: time.Hour},
		policy.SlidingCounter{Limit: 10, Window: time.Hour},
	} {
		t.Run(p.ID(), func(t *testing.T) {
			clk := clock.NewManual(start)
			l, err := New(p, WithClock(clk), WithMaxKeys(1), WithAtCap(EvictStalest), WithSweepInterval(time.Hour))
			require.NoError(t, err)
			defer l.Close()
			require.True(t, l.TakeWithLimit("a", 2, 2).Allowed)
			require.False(t, l.TakeWithLimit("a", 1, 2).Allowed)
			require.Equal(t, ReasonKeyCap, l.Take("b", 1).Reason, "a uses its whole limit of 2: not evictable")
			require.False(t, l.TakeWithLimit("a", 1, 2).Allowed, "a kept its count")
			var st Stats
			l.Stats(&st)
			require.Zero(t, st.EvictedAtCap)
		})
	}
}

// TestEvictStalestSamplesEveryShard: at the cap, with every key far below its limit, a new key
// finds a victim whichever shards hold the keys.
func TestEvictStalestSamplesEveryShard(t *testing.T) {
	clk := clock.NewManual(start)
	l, err := New(policy.SlidingCounter{Limit: 100, Window: time.Hour}, WithClock(clk),
		WithMaxKeys(10), WithAtCap(EvictStalest), WithSweepInterval(time.Hour))
	require.NoError(t, err)
	defer l.Close()
	refused := 0
	for i := range uint64(1010) {
		clk.Advance(time.Millisecond)
		if d := l.TakeKey(i, 1); !d.Allowed {
			require.Equal(t, ReasonKeyCap, d.Reason)
			refused++
		}
	}
	require.Zero(t, refused)
	require.Equal(t, 10, l.Len())
}

// TestEvictStalestRefusesWhenNoneQualifies: with every key at half its limit or more, a new key is
// refused, as with RefuseNewKeys, and nothing is evicted.
func TestEvictStalestRefusesWhenNoneQualifies(t *testing.T) {
	clk := clock.NewManual(start)
	l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Hour}, WithClock(clk),
		WithMaxKeys(8), WithAtCap(EvictStalest), WithSweepInterval(time.Hour))
	require.NoError(t, err)
	defer l.Close()
	for i := range uint64(8) {
		require.True(t, l.AllowKey(i, 5))
	}
	d := l.TakeKey(100, 1)
	require.Equal(t, ReasonKeyCap, d.Reason)
	for i := range uint64(8) {
		require.False(t, l.AllowKey(i, 6), "key %d kept its count", i)
	}
}

// TestKeyCapExactUnderRacingInserts: however many goroutines insert new keys at once, and
// whatever the cap (at, below and above the sizes where a shard's table is rebuilt), exactly cap
// new keys are admitted and Len never passes it.
func TestKeyCapExactUnderRacingInserts(t *testing.T) {
	for _, shards := range []int{1, 4} {
		for _, cap := range []int{1, 7, 8, 13, 14, 28, 29, 100} {
			clk := clock.NewManual(start)
			l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Hour}, WithClock(clk), WithShards(shards),
				WithMaxKeys(cap), WithSweepInterval(time.Hour))
			require.NoError(t, err)
			const workers = 32
			var admitted, over satomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						if l.AllowKey(uint64(w*1000+i), 1) {
							admitted.Add(1)
						}
						if l.Len() > cap {
							over.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, int64(cap), admitted.Load(), "shards %d, cap %d", shards, cap)
			require.Equal(t, cap, l.Len())
			require.Zero(t, over.Load(), "Len passed the cap")
			l.Close()
		}
	}
}

// TestInspectAfterClose: once closed, Inspect answers as Peek does, with nothing: no probe values
// and no tracked key.
func TestInspectAfterClose(t *testing.T) {
	l, _ := newSC(t, 10, time.Second)
	require.True(t, l.AllowN("k", 4))
	pr, tracked := l.Inspect("k")
	require.True(t, tracked)
	require.Equal(t, int64(4), pr.Estimate)
	require.NoError(t, l.Close())
	require.Equal(t, ReasonClosed, l.Peek("k").Reason)
	pr, tracked = l.Inspect("k")
	require.False(t, tracked)
	require.Zero(t, pr)
	pr, tracked = l.InspectKey(1)
	require.False(t, tracked)
	require.Zero(t, pr)
}

// TestDecisionsRefreshTheClock: a limiter whose clock's goroutine never ticks (as when every P is
// busy) still sees time pass, because its decisions refresh the clock: a key at its limit is
// admitted again once its window has passed in real time. Before, it was refused for as long as
// the goroutine did not run.
func TestDecisionsRefreshTheClock(t *testing.T) {
	clk := clock.NewCoarse(time.Hour)
	defer clk.Stop()
	l, err := New(policy.FixedWindow{Limit: 1, Window: 10 * time.Millisecond}, WithClock(clk))
	require.NoError(t, err)
	defer l.Close()
	require.True(t, l.Allow("k"))
	time.Sleep(25 * time.Millisecond) // two windows, in real time
	admitted := false
	for range 50 * clock.RefreshEvery { // no refresh in these calls: about e^-50
		if l.Allow("k") {
			admitted = true
			break
		}
	}
	require.True(t, admitted, "the window never rolled: the clock read %d, the wall clock %d", clk.Now(), time.Now().UnixMilli())
}

// TestEvictStalestRotatesOverShards: successive new keys at the cap sample different shards. With
// the cursor advanced by a fixed 1024, every limiter of up to 1024 shards (the default has 256)
// started each sample at shard 0, so the stalest keys of every shard but the first few and the
// new key's own were never candidates. A sample serves up to evictKeep new keys, so 256 new keys
// take at least 64 samples.
func TestEvictStalestRotatesOverShards(t *testing.T) {
	clk := clock.NewManual(start)
	l, err := New(policy.SlidingCounter{Limit: 100, Window: time.Hour}, WithClock(clk),
		WithMaxKeys(4096), WithAtCap(EvictStalest), WithSweepInterval(time.Hour))
	require.NoError(t, err)
	defer l.Close()
	for i := range uint64(4096) {
		require.True(t, l.AllowKey(i, 1))
	}
	n := uint64(len(l.shards))
	starts := map[uint64]bool{}
	for i := range uint64(64 * evictKeep) {
		clk.Advance(time.Millisecond)
		starts[l.evictCursor.Load()%n] = true
		require.True(t, l.AllowKey(1_000_000+i, 1))
	}
	require.Equal(t, 4096, l.Len())
	require.Greater(t, len(starts), 32, "the samples began at %d distinct shards of %d", len(starts), n)
}

// TestEvictStalestSampleServesSeveralNewKeys: one sample of the shards makes room for evictKeep
// new keys at the cap, the sampler's own and the next ones', which evict its runners-up.
func TestEvictStalestSampleServesSeveralNewKeys(t *testing.T) {
	clk := clock.NewManual(start)
	l, err := New(policy.SlidingCounter{Limit: 100, Window: time.Hour}, WithClock(clk), WithShards(1),
		WithMaxKeys(1024), WithAtCap(EvictStalest), WithSweepInterval(time.Hour))
	require.NoError(t, err)
	defer l.Close()
	for i := range uint64(1024) {
		require.True(t, l.AllowKey(i, 1))
	}
	// With one shard every sample advances the cursor by one.
	from := l.evictCursor.Load()
	for i := range uint64(evictKeep) {
		require.True(t, l.AllowKey(10_000+i, 1))
	}
	require.Equal(t, uint64(1), l.evictCursor.Load()-from, "samples for %d new keys", evictKeep)
	require.True(t, l.AllowKey(20_000, 1))
	require.Equal(t, uint64(2), l.evictCursor.Load()-from, "the pool is spent: a new sample")
	var st Stats
	l.Stats(&st)
	require.Equal(t, int64(evictKeep+1), st.EvictedAtCap)
	require.Equal(t, 1024, l.Len())
}

// TestEvictStalestPoolSkipsRenewedKeys: a key of the pool that was renewed since the sample is not
// evicted from the state the sample judged. Here every pooled key then takes enough to hold half
// its limit, so the next new key must evict the only key still below half: the first new one.
func TestEvictStalestPoolSkipsRenewedKeys(t *testing.T) {
	l := pooledAtCap(t)
	var kept []uint64
	for i := range uint64(8) {
		if _, tracked := l.InspectKey(i); tracked {
			require.True(t, l.AllowKey(i, 40))
			kept = append(kept, i)
		}
	}
	require.Len(t, kept, 7)
	require.True(t, l.AllowKey(101, 10))
	_, tracked := l.InspectKey(100)
	require.False(t, tracked, "key 100, the only one below half its limit, was evicted")
	for _, k := range kept {
		require.Equal(t, int64(50), l.PeekKey(k).Remaining, "key %d kept its 50 units", k)
	}
}

// TestEvictStalestPoolDroppedWhenTheLimitFalls: keys pooled when judged against the policy's limit
// are not evicted once TakeWithLimit has lowered the limit keys are judged against so far that
// they hold half of it.
func TestEvictStalestPoolDroppedWhenTheLimitFalls(t *testing.T) {
	l := pooledAtCap(t)
	d := l.TakeKeyWithLimit(101, 10, 15)
	require.Equal(t, ReasonKeyCap, d.Reason, "every key holds 10, at least half of 15")
	var st Stats
	l.Stats(&st)
	require.Equal(t, int64(1), st.EvictedAtCap)
	require.Equal(t, 8, l.Len())
}

// pooledAtCap returns a one-shard limiter at its cap of 8 keys, each holding 10 of its 100, after
// a new key, 100, evicted one of them and pooled the others.
func pooledAtCap(t *testing.T) *Limiter {
	t.Helper()
	l, err := New(policy.SlidingCounter{Limit: 100, Window: time.Hour}, WithClock(clock.NewManual(start)),
		WithShards(1), WithMaxKeys(8), WithAtCap(EvictStalest), WithSweepInterval(time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	for i := range uint64(8) {
		require.True(t, l.AllowKey(i, 10))
	}
	require.True(t, l.AllowKey(100, 10), "evicts one key and pools the others")
	return l
}

// A state written far ahead of the clock (a manual clock set back from near its end, which package
// clock says not to do) asks for a wait past the longest Duration: RetryAfter saturates rather than
// wrapping negative, which made Wait poll every millisecond.
func TestRetryAfterSaturatesWhenTheClockGoesFarBack(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingLog{Limit: 1, Window: time.Second},
		policy.SlidingCounter{Limit: 1, Window: time.Second},
		policy.FixedWindow{Limit: 1, Window: time.Second},
		policy.TokenBucket{Rate: 1, Burst: 1},
		policy.GCRA{Rate: 1, Burst: 1},
		policy.LeakyBucket{Rate: 1, Capacity: 1},
		policy.DualBucket{RequestsPerMin: 1, TokensPerMin: 1},
	} {
		clk := clock.NewManual(clock.MaxMs - 5000)
		l, err := New(p, WithClock(clk))
		require.NoError(t, err)
		require.True(t, l.Take("k", 1).Allowed, "%T", p)
		clk.Set(0)
		for _, d := range []Decision{l.Take("k", 1), l.Peek("k")} {
			require.GreaterOrEqual(t, d.RetryAfter, time.Duration(0), "%T: %+v", p, d)
		}
		require.NoError(t, l.Close())
	}
	require.Equal(t, time.Duration(math.MaxInt64), msDuration(math.MaxInt64/int64(time.Millisecond)+1))
	require.Equal(t, 1500*time.Millisecond, msDuration(1500))
}

// A type that embeds a policy is not one: New's error names the type, not only the ID it
// inherited, which read as if the sliding counter itself were unsupported.
func TestNewNamesAnEmbeddingPolicyType(t *testing.T) {
	type wrapped struct{ policy.SlidingCounter }
	_, err := New(wrapped{policy.SlidingCounter{Limit: 1, Window: time.Second}})
	require.ErrorContains(t, err, `policy type engine.wrapped (ID "sliding-counter") is not supported`)
}

// pointerTuned is a Policy only through its pointer, as a user's type with a pointer method is.
type pointerTuned struct{ policy.SlidingCounter }

func (p *pointerTuned) Validate() error { return p.SlidingCounter.Validate() }

// TestNewNamesAPointerOnlyPolicyType: such a type is named as unsupported, not called nil.
func TestNewNamesAPointerOnlyPolicyType(t *testing.T) {
	_, err := New(&pointerTuned{policy.SlidingCounter{Limit: 1, Window: time.Second}})
	require.ErrorContains(t, err, `policy type *engine.pointerTuned (ID "sliding-counter") is not supported`)
	_, err = New((*pointerTuned)(nil))
	require.ErrorContains(t, err, "nil policy")
}

// TestKeyHoldingNothingThenAnEarlierClock: after a key comes to hold nothing (a query, a refused
// cost, a refund of everything), a racing goroutine whose clock reads a millisecond earlier,
// in the previous window, counts into the key's own window, as the two-word cell does: the limit
// holds across the two windows' edge, and the racer is told the key's window's end.
func TestKeyHoldingNothingThenAnEarlierClock(t *testing.T) {
	for how, first := range map[string]func(l *Limiter){
		"query":        func(l *Limiter) { l.Take("k", 0) },
		"cost refused": func(l *Limiter) { l.Take("k", 11) },
		"refunded": func(l *Limiter) {
			d := l.Take("k", 4)
			require.Equal(t, int64(4), l.Refund("k", 4, d))
		},
	} {
		for _, cell := range []Option{WithMaxLimit(10), WithMaxLimit(1 << 21)} { // one word, two words
			clk := clock.NewManual(start) // a window's first ms
			l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Second}, WithClock(clk), WithEviction(false), cell)
			require.NoError(t, err)
			first(l)
			clk.Set(start - 1)
			d := l.Take("k", 10)
			require.True(t, d.Allowed, how)
			require.Equal(t, start+1000, d.ResetAt.UnixMilli(), "%s: counted in the key's own window", how)
			clk.Set(start + 500)
			require.False(t, l.Take("k", 5).Allowed, "%s: 15 units within 501 ms against a limit of 10", how)
			l.Close()
		}
	}
}

// TestRefundToNothingFromAStaleClockKeepsTheHorizon: a refund of everything by a goroutine whose
// clock reads five windows behind writes the state at the key's own window, not the refunder's:
// at the last millisecond before the shard must be swept (the one-word cell's horizon, shortest at
// the largest one-word limit), the key decodes as a key in its own window.
func TestRefundToNothingFromAStaleClockKeepsTheHorizon(t *testing.T) {
	const limit = 1<<21 - 1 // the one-word cell's largest limit: a 20-bit window index
	for _, w := range []int64{1, 1000} {
		t0 := start + w/2
		clk := clock.NewManual(t0)
		l, err := New(policy.SlidingCounter{Limit: limit, Window: time.Duration(w) * time.Millisecond}, WithClock(clk), WithEviction(false), WithShards(1))
		require.NoError(t, err)
		d := l.Take("k", 5)
		clk.Set(t0 - 5*w) // past the horizon's margin of four windows, had the refund written at its own window
		require.Equal(t, int64(5), l.Refund("k", 5, d))
		clk.Set(t0 + (1<<19-4)*w - 1)
		d = l.Take("k", limit)
		require.True(t, d.Allowed, "window %d ms: the key holds nothing: %+v", w, d)
		require.LessOrEqual(t, d.ResetAt.UnixMilli()-clk.Now(), w, "window %d ms: reset within the window", w)
		l.Close()
	}
}

// TestLaggardTwoWindowsBehindAKeyHoldingNothing: a goroutine whose clock reads two windows behind
// a key that holds nothing counts into the key's window, as the two-word cell does, not into its
// own: the one-word cell's fast paths compare its window bits with the reader's own, and a state
// holding nothing written two windows back matched such a reader, which then counted the limit a
// second time in a window already full.
func TestLaggardTwoWindowsBehindAKeyHoldingNothing(t *testing.T) {
	for _, cell := range []Option{WithMaxLimit(10), WithMaxLimit(1 << 21)} { // one word, two words
		clk := clock.NewManual(start) // window n's first ms
		l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Second}, WithClock(clk), WithEviction(false), cell)
		require.NoError(t, err)
		require.True(t, l.Take("k", 10).Allowed) // window n: the whole limit
		clk.Set(start + 1999)
		d := l.Take("k", 1) // window n+1: carried floor(10*1/1000) = 0
		require.True(t, d.Allowed)
		clk.Set(start + 2000)
		require.Equal(t, int64(1), l.Refund("k", 1, d)) // window n+2: the key holds nothing
		clk.Set(start + 999)                            // a goroutine still reading window n
		d = l.Take("k", 10)
		require.True(t, d.Allowed)
		require.Equal(t, start+3000, d.ResetAt.UnixMilli(), "counted in the key's window, n+2")
		clk.Set(start + 2001)
		require.False(t, l.Take("k", 10).Allowed, "window n+2 holds the laggard's 10")
		l.Close()
	}
}

// TestSlidingLogRefusalThenAnEarlierClock: a sliding-log request that is refused or costs nothing
// changes no later decision, even one whose clock reads earlier. It used to drop the entries that
// had left its own window, and a request at an earlier reading then found the log emptier than
// at any time: 3 units within 1 s at a limit of 2.
func TestSlidingLogRefusalThenAnEarlierClock(t *testing.T) {
	for how, middle := range map[string]func(l *Limiter){
		"nothing":          func(*Limiter) {},
		"query":            func(l *Limiter) { l.Take("k", 0) },
		"refused":          func(l *Limiter) { l.Take("k", 2) },
		"above the limit":  func(l *Limiter) { l.Take("k", 3) },
		"Allow refused":    func(l *Limiter) { l.AllowN("k", 2) },
		"AllowN query":     func(l *Limiter) { l.AllowN("k", 0) },
		"AllowBatch query": func(l *Limiter) { l.AllowBatch([]string{"k"}, 0, make([]bool, 1)) },
	} {
		clk := clock.NewManual(1000)
		l, err := New(policy.SlidingLog{Limit: 2, Window: time.Second}, WithClock(clk))
		require.NoError(t, err)
		require.True(t, l.Allow("k"))
		clk.Set(1500)
		require.True(t, l.Allow("k"))
		clk.Set(2100) // the unit at 1000 has left this reading's window
		middle(l)
		clk.Set(1400) // and is in this one's, with the unit at 1500: the log is full
		d := l.Take("k", 1)
		require.False(t, d.Allowed, how)
		require.Equal(t, int64(600), d.RetryAfter.Milliseconds(), "%s: until the unit at 1000 leaves, at 2000", how)
		clk.Set(1400)
		require.False(t, l.Allow("k"), how)
		l.Close()
	}
}

// TestEvictStalestBucketOrder: at the cap, the token, leaky and dual buckets evict the key updated
// longest ago, and GCRA, which keeps no time of its last update, the one holding the fewest
// units, as EvictStalest's doc says. Key a took 4 two seconds before key b took 1, and both have refilled
// since: a holds 2 units, b holds 1.
func TestEvictStalestBucketOrder(t *testing.T) {
	for _, tc := range []struct {
		p       policy.Policy
		evicted string
	}{
		{policy.TokenBucket{Rate: 1, Burst: 10}, "a"},
		{policy.LeakyBucket{Rate: 1, Capacity: 10}, "a"},
		{policy.DualBucket{RequestsPerMin: 600, TokensPerMin: 60}, "a"},
		{policy.GCRA{Rate: 1, Burst: 10}, "b"},
	} {
		clk := clock.NewManual(start)
		l, err := New(tc.p, WithClock(clk), WithMaxKeys(2), WithAtCap(EvictStalest), WithShards(1))
		require.NoError(t, err)
		require.True(t, l.AllowN("a", 4))
		clk.Advance(2 * time.Second)
		require.True(t, l.AllowN("b", 1))
		clk.Advance(time.Millisecond)
		require.True(t, l.Allow("c"), tc.p.ID())
		_, tracked := l.Inspect(tc.evicted)
		require.False(t, tracked, "%s: %s evicted", tc.p.ID(), tc.evicted)
		require.Equal(t, 2, l.Len(), tc.p.ID())
		l.Close()
	}
}
