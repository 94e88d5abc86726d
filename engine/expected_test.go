package engine

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
)

// TestExpectedKeysAbove2To32: n above MaxExpectedKeys (possible only where int has 64 bits) is
// refused whatever the key cap, before any memory is taken.
func TestExpectedKeysAbove2To32(t *testing.T) {
	if strconv.IntSize == 32 {
		t.Skip("an int cannot exceed 2^32 here")
	}
	var big uint64 = MaxExpectedKeys + 1
	l, err := New(policy.SlidingCounter{Limit: 1, Window: time.Second}, WithMaxKeys(int(big)), WithExpectedKeys(int(big)))
	require.Nil(t, l)
	require.EqualError(t, err, "engine: WithExpectedKeys(4294967297): must be in [0, 4294967296]")
}

func newWith(t *testing.T, p policy.Policy, opts ...Option) (*Limiter, *clock.Clock) {
	t.Helper()
	clk := clock.NewManual(start)
	l, err := New(p, append([]Option{WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, clk
}

// TestExpectedKeysSizesTablesUpFront: WithExpectedKeys(n) takes the tables' memory at New (1.25
// slots of 16 bytes per key for the sliding counter), and holding n keys then needs no growth;
// more keys still grow the tables. A limiter without it starts small and grows, which shows the
// table figure can tell the two apart.
func TestExpectedKeysSizesTablesUpFront(t *testing.T) {
	const n, shards = 100_000, 16
	l, _ := newSC(t, 5, time.Second, WithShards(shards), WithExpectedKeys(n))
	var st Stats
	l.Stats(&st)
	first := st.TableBytes
	require.GreaterOrEqual(t, first, uint64(n*5/4*16), "room for n keys at a load of 0.8")
	// Each shard's share of 6,250 keys, plus four deviations (4×80) and 8: 6,578 keys at 0.8.
	require.LessOrEqual(t, first, uint64(shards*(6578*5/4+2)*16), "and for four deviations more a shard, no more")

	for i := range uint64(n) {
		require.True(t, l.AllowKey(i, 1))
	}
	l.Stats(&st)
	require.Equal(t, int64(n), st.Keys)
	require.Equal(t, first, st.TableBytes, "n keys fit in the first tables")

	for i := range uint64(n / 5) {
		require.True(t, l.AllowKey(n+i, 1))
	}
	l.Stats(&st)
	require.Greater(t, st.TableBytes, first, "past n keys the tables grow")

	plain, _ := newSC(t, 5, time.Second, WithShards(shards))
	plain.Stats(&st)
	require.Less(t, st.TableBytes, uint64(shards*1024), "without the option the tables start small")
	for i := range uint64(n) {
		plain.AllowKey(i, 1)
	}
	var grown Stats
	plain.Stats(&grown)
	require.Greater(t, grown.TableBytes, 100*st.TableBytes)
}

// TestExpectedKeysSmallSharesDoNotGrow: with a few keys a shard, the random spread of keys over
// shards is large against a share, and a shard sized for its share alone would grow once it held
// 9% more; each shard's headroom covers that, so n keys fit for small n too.
func TestExpectedKeysSmallSharesDoNotGrow(t *testing.T) {
	for _, c := range []struct{ n, shards int }{{5000, DefaultShards}, {20_000, DefaultShards}, {100_000, DefaultShards}, {1 << 20, 65536}} {
		for seed := range uint64(3) {
			l, _ := newSC(t, 5, time.Second, WithShards(c.shards), WithExpectedKeys(c.n), WithSeed(seed))
			var before, after Stats
			l.Stats(&before)
			for i := range uint64(c.n) {
				l.AllowKey(i, 1)
			}
			l.Stats(&after)
			require.Equal(t, int64(c.n), after.Keys)
			require.Equal(t, before.TableBytes, after.TableBytes, "%d keys in %d shards, seed %d: a shard grew", c.n, c.shards, seed)
		}
	}
}

// TestExpectedKeysRoomOutlivesEviction: a presized limiter whose keys all die keeps its tables'
// room for n keys through the sweeps (a plain one shrinks; see TestSweeperShrinksTables), and a
// key decided after that is a new key with its whole limit.
func TestExpectedKeysRoomOutlivesEviction(t *testing.T) {
	const n = 20_000
	l, sweep := handSwept(t, 5, time.Second, WithExpectedKeys(n))
	var st Stats
	l.Stats(&st)
	first := st.TableBytes
	for i := range uint64(n) {
		l.AllowKey(i, 1)
	}
	l.clk.Set(start + 3000)
	l.AllowKey(1<<40, 1)
	sweep()
	sweep()
	l.Stats(&st)
	require.Equal(t, int64(1), st.Keys)
	require.Equal(t, int64(n), st.Evicted)
	require.Equal(t, first, st.TableBytes, "the table is not rebuilt below its first size")
	require.True(t, l.AllowKey(7, 5), "an evicted key starts over")
	require.False(t, l.AllowKey(7, 1))
}

// TestExpectedKeysDecidesAsWithout: presizing changes where keys sit, never a decision. Two
// limiters, one presized, given the same requests over several windows (keys dying and coming
// back, the tables of the plain one growing and being rebuilt) answer every one alike.
func TestExpectedKeysDecidesAsWithout(t *testing.T) {
	for _, p := range []policy.Policy{
		policy.SlidingCounter{Limit: 3, Window: time.Second},
		policy.TokenBucket{Rate: 2, Burst: 3},
		policy.SlidingLog{Limit: 3, Window: time.Second},
	} {
		a, clkA := newWith(t, p, WithShards(4))
		b, clkB := newWith(t, p, WithShards(4), WithExpectedKeys(5000))
		admitted := 0
		for step := range 40_000 {
			k := uint64(step*7919) % 600 // hot keys, each seen every 600 steps
			if step%2 == 1 {
				k = 1000 + uint64(step*104729)%6000 // and a wider set, seen rarely
			}
			if step%1000 == 0 {
				d := 400 * time.Millisecond
				if step%10_000 == 0 {
					d = 3 * time.Second // every key dies
				}
				clkA.Advance(d)
				clkB.Advance(d)
			}
			da, db := a.TakeKey(k, 1), b.TakeKey(k, 1)
			require.Equal(t, da, db, "%T step %d key %d", p, step, k)
			if da.Allowed {
				admitted++
			}
		}
		require.Greater(t, admitted, 1000, "%T: the requests exercised admissions", p)
		require.Less(t, admitted, 40_000, "%T: and refusals", p)
	}
}

// TestExpectedKeysBeyondTheMemoryLimit: tables above the Go memory limit are refused at New,
// naming both sizes, instead of being allocated; below it they are not. 10M keys in 256 shards:
// 39,063 a shard, plus 4×198 and 8, is 39,863 keys, 49,829 slots of 16 bytes and a word: 195 MiB.
func TestExpectedKeysBeyondTheMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(64 << 20)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	sc := policy.SlidingCounter{Limit: 5, Window: time.Second}
	l, err := New(sc, WithShards(256), WithExpectedKeys(10_000_000))
	require.True(t, l == nil, "New returned a limiter")
	require.EqualError(t, err, "engine: WithExpectedKeys(10000000) needs 195 MiB of tables at New, more than the Go memory limit, 64 MiB (GOMEMLIMIT)")

	debug.SetMemoryLimit(1 << 30)
	l, err = New(sc, WithShards(256), WithExpectedKeys(10_000_000))
	require.NoError(t, err)
	var st Stats
	l.Stats(&st)
	require.Equal(t, uint64(256*(49_829*2+1)*8), st.TableBytes, "the size the error names is the size taken")
	require.NoError(t, l.Close())
}

// TestExpectedKeysBeyondTheAddressSpace: tables that do not fit in what the process's
// address-space limit (ulimit -v) leaves of it, beside what is mapped already and one heap arena
// of 64 MiB, are refused at New, naming it.
func TestExpectedKeysBeyondTheAddressSpace(t *testing.T) {
	t.Cleanup(func() { addressSpace, mappedNow = addressSpaceLimit, addressSpaceInUse })
	sc := policy.SlidingCounter{Limit: 5, Window: time.Second}
	addressSpace = func() uint64 { return 1400 << 20 }
	mappedNow = func() uint64 { return 1200 << 20 }
	l, err := New(sc, WithShards(256), WithExpectedKeys(10_000_000))
	require.True(t, l == nil, "New returned a limiter")
	require.EqualError(t, err, "engine: WithExpectedKeys(10000000) needs 195 MiB of tables at New, more than this process's address space has left, 200 MiB of 1.4 GiB (ulimit -v)")
	// Fits in what is left, but not with the arena beside it.
	l, err = New(sc, WithShards(256), WithExpectedKeys(7_500_000))
	require.True(t, l == nil, "New returned a limiter")
	require.ErrorContains(t, err, "needs 147 MiB of tables at New, more than this process's address space has left, 200 MiB")
	l, err = New(sc, WithShards(256), WithExpectedKeys(1_000_000))
	require.NoError(t, err, "20 MiB and the arena fit in 200 MiB")
	require.NoError(t, l.Close())
	mappedNow = func() uint64 { return 1500 << 20 } // mapped past the limit already
	_, err = New(sc, WithShards(256), WithExpectedKeys(1_000_000))
	require.ErrorContains(t, err, "has left, 0 MiB of 1.4 GiB (ulimit -v)")
}

// TestExpectedKeysBeyondA32BitAddressSpace: on a 32-bit platform, tables that do not fit in the
// 3 GiB a process can map there, beside what it has mapped and one heap arena, are refused at New,
// whatever ulimit -v says: allocated, they ended the process ("out of memory", or "makeslice: len
// out of range" for one shard's table past 4 GiB).
func TestExpectedKeysBeyondA32BitAddressSpace(t *testing.T) {
	t.Cleanup(func() { pointerSpace, mappedNow = pointerSpace32, addressSpaceInUse })
	sc := policy.SlidingCounter{Limit: 5, Window: time.Second}
	pointerSpace = func() uint64 { return 3 << 30 }
	mappedNow = func() uint64 { return 1 << 30 }
	l, err := New(sc, WithShards(256), WithMaxKeys(1<<27), WithExpectedKeys(1<<27))
	require.True(t, l == nil, "New returned a limiter")
	require.EqualError(t, err, "engine: WithExpectedKeys(134217728) needs 2.5 GiB of tables at New, more than a 32-bit process's address space has left, 2.0 GiB of 3.0 GiB")
	l, err = New(sc, WithShards(256), WithExpectedKeys(1_000_000))
	require.NoError(t, err, "20 MiB and the arena fit in 2 GiB")
	require.NoError(t, l.Close())
}

// TestExpectedKeysOn32Bits: on a real 32-bit platform, New refuses tables past its address space
// with an error, where allocating them ended the process.
func TestExpectedKeysOn32Bits(t *testing.T) {
	if strconv.IntSize != 32 {
		t.Skip("a 64-bit process: TestExpectedKeysBeyondA32BitAddressSpace stands in one")
	}
	sc := policy.SlidingCounter{Limit: 5, Window: time.Second}
	for _, opts := range [][]Option{
		{WithMaxKeys(1 << 28), WithExpectedKeys(1 << 28)},
		{WithShards(1), WithMaxKeys(150_000_000), WithExpectedKeys(150_000_000)},
		{WithMaxKeys(MaxExpectedKeys), WithExpectedKeys(MaxExpectedKeys)},
	} {
		l, err := New(sc, opts...)
		require.True(t, l == nil, "New returned a limiter")
		require.ErrorContains(t, err, "more than a 32-bit process's address space has left")
	}
}

// TestExpectedKeysBeyondTheControlGroup: tables above the process's control-group limit (a
// container's) are refused at New, naming it, even on a machine with the memory for them.
func TestExpectedKeysBeyondTheControlGroup(t *testing.T) {
	t.Cleanup(func() { groupMemory = cgroupMemory })
	sc := policy.SlidingCounter{Limit: 5, Window: time.Second}
	groupMemory = func() uint64 { return 100 << 20 }
	l, err := New(sc, WithShards(256), WithExpectedKeys(10_000_000))
	require.True(t, l == nil, "New returned a limiter")
	require.EqualError(t, err, "engine: WithExpectedKeys(10000000) needs 195 MiB of tables at New, more than this process's control group allows, 100 MiB (its memory limit)")
	l, err = New(sc, WithShards(256), WithExpectedKeys(1_000_000))
	require.NoError(t, err, "20 MiB fits")
	require.NoError(t, l.Close())
	groupMemory = func() uint64 { return 0 }
	l, err = New(sc, WithShards(256), WithExpectedKeys(10_000_000))
	require.NoError(t, err, "no limit set")
	require.NoError(t, l.Close())
}

// TestExpectedKeysBeyondTheMachine: tables above the machine's memory are refused at New; where
// the platform does not tell the memory, nothing is refused for it.
func TestExpectedKeysBeyondTheMachine(t *testing.T) {
	if runtime.GOOS == "linux" {
		require.Greater(t, systemMemory(), uint64(1<<20), "Linux tells the machine's memory")
	}
	t.Cleanup(func() { machineMemory = systemMemory })
	sc := policy.SlidingCounter{Limit: 5, Window: time.Second}
	machineMemory = func() uint64 { return 100 << 20 }
	l, err := New(sc, WithShards(256), WithExpectedKeys(10_000_000))
	require.True(t, l == nil, "New returned a limiter")
	require.EqualError(t, err, "engine: WithExpectedKeys(10000000) needs 195 MiB of tables at New, more than this machine's memory, 100 MiB")
	l, err = New(sc, WithShards(256), WithExpectedKeys(1_000_000))
	require.NoError(t, err, "20 MiB fits")
	require.NoError(t, l.Close())
	machineMemory = func() uint64 { return 0 }
	l, err = New(sc, WithShards(256), WithExpectedKeys(10_000_000))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestExpectedKeysCountsOtherOpenLimiters: each presized limiter is judged with the tables the
// open ones took, so that several which fit alone are not let past a limit together; Close
// gives the room back. 3M keys in 256 shards: 11,719 a shard, plus 4×109 and 8, is 12,163 keys,
// 15,204 slots of 16 bytes and a word: 62,277,632 bytes (59.4 MiB) a limiter.
func TestExpectedKeysCountsOtherOpenLimiters(t *testing.T) {
	t.Cleanup(func() { groupMemory = cgroupMemory })
	groupMemory = func() uint64 { return 100 << 20 }
	sc := policy.SlidingCounter{Limit: 5, Window: time.Second}
	first, err := New(sc, WithShards(256), WithExpectedKeys(3_000_000))
	require.NoError(t, err, "60 MiB fits alone")
	second, err := New(sc, WithShards(256), WithExpectedKeys(3_000_000))
	require.True(t, second == nil, "New returned a limiter")
	require.EqualError(t, err, "engine: WithExpectedKeys(3000000) needs 60 MiB of tables at New (119 MiB with the 60 MiB other open limiters' WithExpectedKeys took), more than this process's control group allows, 100 MiB (its memory limit)")
	small, err := New(sc, WithShards(256), WithExpectedKeys(1_000_000))
	require.NoError(t, err, "the refused one's room was not kept: 60 and 20 MiB fit")
	require.NoError(t, small.Close())
	require.NoError(t, first.Close())
	require.NoError(t, first.Close(), "a second Close gives nothing back twice")
	second, err = New(sc, WithShards(256), WithExpectedKeys(3_000_000))
	require.NoError(t, err, "Close gave the first one's room back, once (twice would wrap the count)")
	third, err := New(sc, WithShards(256), WithExpectedKeys(2_200_000))
	require.True(t, third == nil, "60 and 44 MiB do not fit")
	require.ErrorContains(t, err, "(104 MiB with the 60 MiB other open limiters' WithExpectedKeys took)")
	require.NoError(t, second.Close())
}
