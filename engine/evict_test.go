package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// handSwept returns a limiter whose background sweeper never ticks on its own, so the test steps
// it by hand, deterministically.
func handSwept(t *testing.T, limit int64, window time.Duration, opts ...Option) (*Limiter, func()) {
	l, _ := newSC(t, limit, window, append([]Option{WithSweepInterval(time.Hour), WithShards(1)}, opts...)...)
	return l, func() { l.sweeper.Step(1 << 20) }
}

func TestSweeperEvictsOnlyDeadKeys(t *testing.T) {
	l, sweep := handSwept(t, 5, time.Second)
	clk := l.clk
	require.True(t, l.AllowN("old", 5))
	clk.Set(start + 1500)
	require.True(t, l.AllowN("recent", 2))
	require.Equal(t, 2, l.Len())

	sweep()
	require.Equal(t, 2, l.Len(), "nothing is dead yet")

	clk.Set(start + 2000) // "old" was last counted in window 0; window 2 begins: dead
	sweep()
	require.Equal(t, 1, l.Len())
	var st Stats
	l.Stats(&st)
	require.Equal(t, int64(1), st.Evicted)
	_, tracked := l.Inspect("old")
	require.False(t, tracked)
	pr, tracked := l.Inspect("recent")
	require.True(t, tracked)
	require.Equal(t, int64(2), pr.Estimate, "a live key keeps its count through a sweep")

	// The evicted key behaves exactly as a new one: its whole limit is available.
	require.True(t, l.AllowN("old", 5))
	require.Equal(t, 2, l.Len())
}

func TestSweeperShrinksTables(t *testing.T) {
	l, sweep := handSwept(t, 5, time.Second)
	for i := range uint64(20_000) {
		l.AllowKey(i, 1)
	}
	var before, after Stats
	l.Stats(&before)
	l.clk.Set(start + 3000)
	l.AllowKey(1<<40, 1) // one key stays live
	sweep()
	sweep()
	l.Stats(&after)
	require.Equal(t, int64(1), after.Keys)
	require.Equal(t, int64(20_000), after.Evicted)
	require.Less(t, after.TableBytes, before.TableBytes/100, "a table left empty is rebuilt small")
	pr, tracked := l.InspectKey(1 << 40)
	require.True(t, tracked)
	require.Equal(t, int64(1), pr.Estimate)
}

// TestEvictionStress: goroutines hit keys that keep dying (the clock jumps by up to 2.5 windows)
// while the sweeper evicts them every millisecond and tables are rebuilt. Whatever the
// interleaving, no window of any key admits more than the limit: an admitted request written into
// a cell that was being evicted would be lost, and the key would admit again.
func TestEvictionStress(t *testing.T) {
	const limit, keys, workers = 5, 1024, 6
	l, clk := newSC(t, limit, 10*time.Millisecond, WithSweepInterval(time.Millisecond), WithShards(4))
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
			clk.Advance(time.Duration(r.IntN(25)) * time.Millisecond)
			time.Sleep(50 * time.Microsecond)
		}
	}()
	type win struct {
		key   uint64
		reset int64
	}
	counts := make([]map[win]int64, workers)
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		counts[w] = map[win]int64{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for i := 0; i < 20_000 || !done.Load(); i++ {
				k := uint64(r.IntN(keys))
				cost := int64(1 + r.IntN(2))
				if d := l.TakeKey(k, cost); d.Allowed {
					counts[w][win{k, d.ResetAt.UnixMilli()}] += cost
				}
			}
		}()
	}
	// Run until the sweeper has evicted enough keys for the race to have been exercised; a
	// machine too slow to get there in a minute fails below rather than passing vacuously.
	var st Stats
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if l.Stats(&st); st.Evicted >= 500 {
			break
		}
	}
	done.Store(true)
	wg.Wait()
	close(stop)
	driver.Wait()
	total := map[win]int64{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	for k, v := range total {
		require.LessOrEqual(t, v, int64(limit), "key %d, window ending %d: admitted %d", k.key, k.reset, v)
	}
	l.Stats(&st)
	require.GreaterOrEqual(t, st.Evicted, int64(500), "the sweeper must have evicted keys for the test to mean anything")
	t.Logf("windows checked: %d, keys evicted: %d", len(total), st.Evicted)
}

func TestKeyCapRefusesNewKeys(t *testing.T) {
	l, _ := handSwept(t, 3, time.Second, WithMaxKeys(10))
	for i := range uint64(10) {
		require.True(t, l.AllowKey(i, 1))
	}
	d := l.TakeKey(10, 1)
	require.False(t, d.Allowed)
	require.Equal(t, ReasonKeyCap, d.Reason)
	require.True(t, l.AllowKey(3, 1), "tracked keys are decided as usual at the cap")
	require.Equal(t, 10, l.Len())
	var st Stats
	l.Stats(&st)
	require.Equal(t, int64(1), st.RefusedAtCap)

	require.Zero(t, st.ReclaimedAtCap)

	// Two windows later every key is dead; a new key reclaims them without waiting for a sweep.
	l.clk.Set(start + 2000)
	require.True(t, l.AllowKey(10, 1))
	require.LessOrEqual(t, l.Len(), 10)
	l.Stats(&st)
	require.Positive(t, st.ReclaimedAtCap, "the dead keys the new key's request removed")
	require.LessOrEqual(t, st.ReclaimedAtCap, int64(10))
	require.Zero(t, st.EvictedAtCap, "nothing live was evicted: the policy refuses new keys at the cap")
	require.Zero(t, st.Evicted, "the sweeper did not run")
}

// TestKeyCapReclaimsKeysHoldingNothing: a key that holds no units (made by a query, by a first
// request refused for its cost, or refunded to nothing) is dead, and a new key at the cap takes
// its place at once, in its own window, for every policy: the sliding counter's one-word cell,
// whose sweeps skip most live states by a pattern of their window, once kept such keys for two
// windows. Limits on both sides of 2^21 cover both of its cells.
func TestKeyCapReclaimsKeysHoldingNothing(t *testing.T) {
	limiters := map[string]func(clk *clock.Clock) (*Limiter, error){
		"sliding-counter": func(clk *clock.Clock) (*Limiter, error) {
			return New(policy.SlidingCounter{Limit: 10, Window: time.Minute}, WithClock(clk), WithMaxKeys(1), WithShards(1))
		},
		"sliding-counter-pair": func(clk *clock.Clock) (*Limiter, error) {
			return New(policy.SlidingCounter{Limit: 1 << 21, Window: time.Minute}, WithClock(clk), WithMaxKeys(1), WithShards(1))
		},
		"fixed-window": func(clk *clock.Clock) (*Limiter, error) {
			return New(policy.FixedWindow{Limit: 10, Window: time.Minute}, WithClock(clk), WithMaxKeys(1), WithShards(1))
		},
	}
	holdNothing := map[string]func(l *Limiter){
		"query":        func(l *Limiter) { require.True(t, l.Take("first", 0).Allowed) },
		"cost refused": func(l *Limiter) { require.Equal(t, ReasonCostAboveLimit, l.Take("first", 1<<30).Reason) },
		"refunded": func(l *Limiter) {
			d := l.Take("first", 3)
			require.True(t, d.Allowed)
			require.Equal(t, int64(3), l.Refund("first", 3, d))
		},
	}
	for pname, mk := range limiters {
		for how, first := range holdNothing {
			t.Run(pname+"/"+how, func(t *testing.T) {
				clk := clock.NewManual(start + 30_000) // mid-window: no window passes below
				l, err := mk(clk)
				require.NoError(t, err)
				defer l.Close()
				first(l)
				require.Equal(t, 1, l.Len(), "the first key is tracked")
				d := l.Take("second", 1)
				require.True(t, d.Allowed, "a key holding nothing gives way at the cap: %+v", d)
				require.Equal(t, ReasonOK, d.Reason)
				var st Stats
				l.Stats(&st)
				require.Equal(t, int64(1), st.ReclaimedAtCap, "%+v", st)
				require.Equal(t, 1, l.Len())
			})
		}
	}
}

// TestKeyCapCountsDeadEvictions: at the cap, a new key that takes a dead key's place counts in
// ReclaimedAtCap, whether the bounded reclaim found it or EvictStalest chose it (with 64 shards,
// most dead keys lie outside the new key's shard, where only the sample reaches), never in
// EvictedAtCap. Each new key comes two windows after the one before, so every key it can displace
// is dead. (TestKeyCapEvictsStalestButNeverALimitedKey counts the live ones.)
func TestKeyCapCountsDeadEvictions(t *testing.T) {
	// Seeded: with a random seed, two of the first keys in one shard, both still there at the
	// last step, would be reclaimed together (21), once in about 10^5 runs.
	l, _ := handSwept(t, 3, time.Second, WithMaxKeys(10), WithAtCap(EvictStalest), WithShards(64), WithSeed(1))
	for i := range uint64(10) {
		require.True(t, l.AllowKey(i, 1))
	}
	for i := range uint64(20) {
		l.clk.Set(start + 2000*int64(i+1))
		require.True(t, l.AllowKey(100+i, 1), "new key %d", i)
	}
	var st Stats
	l.Stats(&st)
	require.Equal(t, int64(20), st.ReclaimedAtCap, "every key replaced was dead: %+v", st)
	require.Zero(t, st.EvictedAtCap, "%+v", st)
	require.Zero(t, st.Evicted, "the sweeper did not run")
}

func TestKeyCapEvictsStalestButNeverALimitedKey(t *testing.T) {
	l, _ := handSwept(t, 3, time.Second, WithMaxKeys(10), WithAtCap(EvictStalest))
	require.True(t, l.AllowN("abuser", 3))
	for i := range uint64(9) {
		l.clk.Set(start + 10 + int64(i))
		require.True(t, l.AllowKey(i, 1))
	}
	// A flood of new keys: each gets in by evicting the stalest key below its limit.
	for i := range uint64(200) {
		l.clk.Set(start + 100 + int64(i))
		require.True(t, l.AllowKey(1000+i, 1), "new key %d", i)
		require.LessOrEqual(t, l.Len(), 10)
	}
	d := l.Take("abuser", 1)
	require.False(t, d.Allowed, "the key at its limit was not evicted, so flooding did not reset it")
	require.Equal(t, ReasonLimited, d.Reason)
	// Every new key after the first nine took a live key's place: 200 evictions, none of a dead
	// key (the clock never moved a window on).
	var st Stats
	l.Stats(&st)
	require.Equal(t, int64(200), st.EvictedAtCap)
	require.Zero(t, st.ReclaimedAtCap)
	require.Zero(t, st.RefusedAtCap)
}

// TestKeyCapEvictsUnderARacingFlood: goroutines flood new keys into a limiter at its cap where
// every tracked key may be evicted. The room one request makes can be taken by another's insert
// before it reserves it; a request then makes room again, so no new key is refused while keys
// that qualify remain, and the cap holds throughout.
func TestKeyCapEvictsUnderARacingFlood(t *testing.T) {
	const (
		goroutines = 8
		perG       = 5000
		maxKeys    = 4096
	)
	l, _ := newSC(t, 1000, time.Hour, WithMaxKeys(maxKeys), WithAtCap(EvictStalest), WithShards(16))
	var refused atomic.Int64
	var wg sync.WaitGroup
	for g := range uint64(goroutines) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range uint64(perG) {
				if !l.AllowKey(g<<32|i, 1) {
					refused.Add(1)
				}
				if n := l.Len(); n > maxKeys {
					t.Errorf("Len %d above the cap", n)
					return
				}
			}
		}()
	}
	wg.Wait()
	var st Stats
	l.Stats(&st)
	require.Zero(t, refused.Load(), "new keys refused while evictable keys remained")
	require.Zero(t, st.RefusedAtCap)
	require.Equal(t, maxKeys, l.Len())
}

// TestHashFlooding: keys chosen to fall into one shard under a known seed spread evenly under the
// default per-process random seed.
func TestHashFlooding(t *testing.T) {
	const shards, want = 16, 2048
	p := policy.SlidingCounter{Limit: 10, Window: time.Minute}
	known, err := New(p, WithSeed(1), WithShards(shards), WithEviction(false))
	require.NoError(t, err)
	defer known.Close()
	var strs []string
	var ints []uint64
	for i := 0; len(strs) < want || len(ints) < want; i++ {
		s := fmt.Sprintf("client-%d", i)
		if len(strs) < want && known.shard(known.hashString(s)) == &known.shards[0] {
			strs = append(strs, s)
		}
		if len(ints) < want && known.shard(known.hashKey(uint64(i))) == &known.shards[0] {
			ints = append(ints, uint64(i))
		}
	}
	for _, c := range []struct {
		name string
		seed []Option
	}{
		{"known seed", []Option{WithSeed(1)}},
		{"random seed", nil},
	} {
		for _, kind := range []string{"strings", "integers"} {
			l, err := New(p, append([]Option{WithShards(shards), WithEviction(false)}, c.seed...)...)
			require.NoError(t, err)
			if kind == "strings" {
				for _, s := range strs {
					l.Allow(s)
				}
			} else {
				for _, k := range ints {
					l.AllowKey(k, 1)
				}
			}
			var largest int64
			for i := range l.shards {
				largest = max(largest, l.shards[i].Live())
			}
			mean := int64(want / shards)
			if c.name == "known seed" {
				require.Equal(t, int64(want), largest, "%s: the crafted keys all land in one shard", kind)
			} else {
				require.LessOrEqual(t, largest, 2*mean, "%s: largest shard %d, mean %d", kind, largest, mean)
			}
			l.Close()
		}
	}
}

func TestStats(t *testing.T) {
	l, _ := newSC(t, 5, time.Second, WithShards(8), WithEviction(false))
	require.NotPanics(t, func() { l.Stats(nil) }, "a nil Stats is left alone")
	for i := range uint64(1000) {
		l.AllowKey(i, 1)
	}
	var st Stats
	l.Stats(&st)
	require.Equal(t, int64(1000), st.Keys)
	require.Equal(t, 8, st.Shards)
	// 1000 keys in 16-byte slots at a load between 0.7 and 0.875, plus empty tables' minimum.
	require.GreaterOrEqual(t, st.TableBytes, uint64(1000*16))
	require.LessOrEqual(t, st.TableBytes, uint64(1000*16*10/7+8*2*16*8))
	require.Zero(t, testing.AllocsPerRun(100, func() { l.Stats(&st) }))
}

// TestEvictionOffAtTheCap: with eviction off a dead key is never reclaimed, not even by a new key
// at the cap, which is refused; WithAtCap(EvictStalest) still evicts it to make room.
func TestEvictionOffAtTheCap(t *testing.T) {
	for _, c := range []struct {
		atCap AtCap
		want  Reason
	}{{RefuseNewKeys, ReasonKeyCap}, {EvictStalest, ReasonOK}} {
		l, _ := newSC(t, 5, time.Second, WithEviction(false), WithMaxKeys(1), WithShards(1), WithAtCap(c.atCap))
		require.True(t, l.AllowN("old", 5))
		l.clk.Set(start + 5000) // "old" is long dead
		d := l.Take("new", 1)
		require.Equal(t, c.want, d.Reason, "at cap %d", c.atCap)
		require.Equal(t, 1, l.Len())
	}
}

// TestCostAboveLimitAtCapConsumesNothing: at the key cap, a new key's cost above the limit is
// refused as such (ReasonCostAboveLimit, not ReasonKeyCap) without evicting a live key's units
// for it; below the cap the key is still tracked, as the policies' rules say.
func TestCostAboveLimitAtCapConsumesNothing(t *testing.T) {
	for name, atCap := range map[string]AtCap{"evict": EvictStalest, "refuse": RefuseNewKeys} {
		t.Run(name, func(t *testing.T) {
			l, clk := newSC(t, 10, time.Second, WithMaxKeys(1), WithShards(1), WithAtCap(atCap), WithMaxLimit(100))
			require.True(t, l.AllowN("victim", 4))
			clk.Advance(time.Millisecond)
			for _, d := range []Decision{
				l.Take("attacker", 11),
				l.TakeKey(7, 11),
			} {
				require.False(t, d.Allowed)
				require.Equal(t, ReasonCostAboveLimit, d.Reason)
				require.Equal(t, time.Duration(0), d.RetryAfter)
			}
			require.False(t, l.AllowN("attacker", 11))
			require.False(t, l.AllowKey(7, 1<<40))
			require.Equal(t, int64(6), l.Peek("victim").Remaining, "the victim's units were kept")
			var s Stats
			l.Stats(&s)
			require.Equal(t, int64(1), s.Keys)
			require.Zero(t, s.EvictedAtCap)
			require.Zero(t, s.RefusedAtCap, "refused for its cost, not for the cap")

			// A cost that could be admitted is still the cap's business.
			d := l.Take("attacker", 10)
			if atCap == EvictStalest {
				require.True(t, d.Allowed)
				require.Equal(t, int64(10), l.Peek("victim").Remaining, "evicted for a request that counts")
			} else {
				require.Equal(t, ReasonKeyCap, d.Reason)
			}

			// A per-key limit is the bound for TakeWithLimit (it also lowers the limit EvictStalest
			// judges by, so this goes last).
			d = l.TakeWithLimit("third", 6, 5)
			require.Equal(t, ReasonCostAboveLimit, d.Reason)
			require.Equal(t, int64(5), d.Limit)
			l.Stats(&s)
			require.Equal(t, int64(1), s.Keys)
			require.LessOrEqual(t, s.EvictedAtCap, int64(1))
		})
	}

	// Below the cap the refused key is tracked.
	l, _ := newSC(t, 10, time.Second, WithMaxKeys(2), WithShards(1), WithAtCap(EvictStalest))
	require.Equal(t, ReasonCostAboveLimit, l.Take("k", 11).Reason)
	require.Equal(t, 1, l.Len())
}

// TestEvictPoolStaysEmptyAfterClose: a sample that ends after Close (one whose request passed
// the closed check before it) does not refill the pool Close emptied, whose cells would keep the
// limiter's tables alive for as long as the Limiter value is.
func TestEvictPoolStaysEmptyAfterClose(t *testing.T) {
	clk := clock.NewManual(1_764_000_000_000)
	l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Minute}, WithClock(clk), WithShards(1),
		WithMaxKeys(64), WithAtCap(EvictStalest), WithEviction(false))
	if err != nil {
		t.Fatal(err)
	}
	for k := range uint64(64) {
		if !l.AllowKey(k, 1) {
			t.Fatalf("key %d refused below the cap", k)
		}
		clk.Advance(time.Millisecond) // so that the keys' ages differ
	}
	l.Close()
	if evicted, found := l.evictStalest(&l.shards[0], clk.Now()); !evicted || !found {
		t.Fatalf("evictStalest on a full limiter: evicted %v, found %v; the test needs a sample", evicted, found)
	}
	l.evictMu.Lock()
	n := l.evictPool.Len()
	l.evictMu.Unlock()
	if n != 0 {
		t.Fatalf("the pool holds %d candidates after Close", n)
	}
}

// With the shared coarse clock, which sleeps once nothing has refreshed it for a second, an idle
// limiter's sweeper still evicts its dead keys: it reads the time without waking the clock, and
// without leaving it behind the wall clock.
func TestIdleSweepEvictsWhileTheClockSleeps(t *testing.T) {
	l, err := New(policy.SlidingCounter{Limit: 10, Window: time.Second}, WithSweepInterval(10*time.Millisecond), WithShards(1))
	require.NoError(t, err)
	defer l.Close()
	for k := range uint64(100) {
		require.True(t, l.AllowKey(k, 1))
	}
	require.Equal(t, 100, l.Len())
	// Dead two windows (2s) after their request, a second after the clock has fallen asleep for
	// want of decisions; the sweep period is 2s.
	require.Eventually(t, func() bool { return l.Len() == 0 }, 20*time.Second, 50*time.Millisecond,
		"the idle limiter's dead keys were not evicted")
}
