package shard

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync"
	satomic "sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/policy"
)

const now = int64(1_764_000_000_000)

func newShard(t testing.TB, limit int64, evict bool) (*Shard, *Config) {
	t.Helper()
	cfg := &Config{
		Codec: atomic.NewSlidingCounter(policy.SlidingCounter{Limit: limit, Window: time.Second}),
		Evict: evict,
		Keys:  new(satomic.Int64),
	}
	s := new(Shard)
	s.Init(cfg, now)
	return s, cfg
}

func TestAcquireFindAndGrow(t *testing.T) {
	s, cfg := newShard(t, 10, false)
	for h := uint64(1); h <= 10_000; h++ {
		c, created, _ := s.Acquire(cfg, h*0x9e3779b97f4a7c15|1, now)
		require.True(t, created)
		require.NotNil(t, c)
	}
	_, created, _ := s.Acquire(cfg, 1*0x9e3779b97f4a7c15|1, now)
	require.False(t, created, "a tracked key is not created twice")
	require.Equal(t, int64(10_000), s.Live())
	require.Equal(t, int64(10_000), cfg.Keys.Load())
	t0 := s.Table()
	for h := uint64(1); h <= 10_000; h++ {
		require.NotNil(t, t0.Find(h*0x9e3779b97f4a7c15|1), "key %d", h)
	}
	require.Nil(t, t0.Find(12345))
	// The load stays between the target and the maximum.
	used := float64(10_000) / float64(t0.Slots())
	require.GreaterOrEqual(t, used, 0.5)
	require.LessOrEqual(t, used, 7.0/8)
}

// TestRebuildKeepsConcurrentUpdates: updates racing with rebuilds either land before a cell is
// copied or retry in the new table; none is lost.
func TestRebuildKeepsConcurrentUpdates(t *testing.T) {
	s, cfg := newShard(t, 1<<20, false)
	const hot = uint64(0xabcdef)
	s.Acquire(cfg, hot, now)
	var admitted satomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20_000 {
				for {
					c := s.Table().Find(hot)
					r, st := cfg.Codec.Take(c, now, 1)
					if st == atomic.OK {
						if r.Allowed {
							admitted.Add(1)
						}
						break
					}
					s.Wait()
				}
			}
		}()
	}
	for h := uint64(1); h <= 20_000; h++ { // grow the table under the updaters, many times over
		s.Acquire(cfg, h*0x9e3779b97f4a7c15, now)
	}
	wg.Wait()
	_, pr, st := cfg.Codec.Peek(s.Table().Find(hot), now)
	require.Equal(t, atomic.OK, st)
	require.Equal(t, admitted.Load(), pr.Estimate)
	require.Equal(t, int64(80_000), admitted.Load())
}

// TestRunFindsWhatFindFinds: a Run's lookups give Find's answers, for tracked keys, absent keys
// and keys whose home is the last slot (the prefetch near the table's end reads no word past it:
// under -race or purego it loads the home word, and checkptr faults a pointer moved outside its
// allocation). After a rebuild a Run set before it still reads the old table, whose cells are all
// Moved, so a caller's codec sends the decision the general way.
func TestRunFindsWhatFindFinds(t *testing.T) {
	s, cfg := newShard(t, 10, false)
	hs := []uint64{1, 1 << 63, ^uint64(0), ^uint64(0) - 1<<60}
	for h := uint64(1); h <= 40; h++ {
		hs = append(hs, h*0x9e3779b97f4a7c15|1)
	}
	for _, h := range hs[4:24] {
		s.Acquire(cfg, h, now)
	}
	for start := 0; start < len(hs); start += RunLen {
		batch := hs[start:min(start+RunLen, len(hs))]
		var r Run
		for i, h := range batch {
			r.Set(i, s, h)
		}
		r.PrefetchSpan(0, len(batch))
		for i, h := range batch {
			wantC, wantFree := s.Table().Lookup(h)
			rt, c, free := r.Lookup(i, h)
			require.Same(t, s.Table(), rt, "key %x", h)
			require.Equal(t, wantC, c, "key %x", h)
			require.Equal(t, wantFree, free, "key %x", h)
		}
	}
	tracked := hs[10]
	var r Run
	r.Set(0, s, tracked)
	old := s.Table()
	s.mu.Lock()
	s.rebuild(cfg, now, 0)
	s.mu.Unlock()
	require.NotSame(t, old, s.Table(), "the rebuild published a new table")
	rt, c, _ := r.Lookup(0, tracked)
	require.Same(t, old, rt, "the run reads the table it was set on")
	require.Same(t, old.Find(tracked), c, "the run reads the table it was set on")
	_, st := cfg.Codec.Admit(c, now, 1)
	require.Equal(t, atomic.IsMoved, st)
	for _, words := range []int{1, 2} {
		tb := newTable(minSlots, words, 0)
		require.Equal(t, tb.n-1, tb.home(^uint64(0)), "the last slot is a home")
	}
}

// TestAcquireFromResumesOnlyWhereSafe: AcquireFrom's hint is the empty slot a lock-free Lookup
// stopped at. If a racing insert has since filled that slot with another key, or with the same
// key, or the table has been rebuilt, the result is still exactly Acquire's.
func TestAcquireFromResumesOnlyWhereSafe(t *testing.T) {
	const h = uint64(0x9e3779b97f4a7c15)
	t.Run("slot taken by another key", func(t *testing.T) {
		s, cfg := newShard(t, 10, false)
		tb := s.Table()
		c, free := tb.Lookup(h)
		require.Nil(t, c)
		c2, created, _ := s.Acquire(cfg, h+1, now) // the same home: it takes the free slot
		require.True(t, created)
		c3, _ := tb.Lookup(h + 1)
		require.Same(t, c2, c3)
		_, free2 := tb.Lookup(h)
		require.NotEqual(t, free, free2, "h+1 filled the slot the first lookup stopped at")
		c1, created, _ := s.AcquireFrom(cfg, h, now, tb, free)
		require.True(t, created)
		require.NotSame(t, c2, c1)
		require.Same(t, c1, s.Table().Find(h))
		require.Same(t, c2, s.Table().Find(h+1))
		require.Equal(t, int64(2), s.Live())
	})
	t.Run("slot taken by the same key", func(t *testing.T) {
		s, cfg := newShard(t, 10, false)
		tb := s.Table()
		_, free := tb.Lookup(h)
		c1, created, _ := s.Acquire(cfg, h, now)
		require.True(t, created)
		c2, created, _ := s.AcquireFrom(cfg, h, now, tb, free)
		require.False(t, created, "a racing insert got there first")
		require.Same(t, c1, c2)
		require.Equal(t, int64(1), s.Live())
	})
	t.Run("table rebuilt", func(t *testing.T) {
		s, cfg := newShard(t, 10, false)
		tb := s.Table()
		_, free := tb.Lookup(h)
		for k := uint64(1); k <= 100; k++ {
			_, _, _ = s.Acquire(cfg, k*0x2545f4914f6cdd1d|1, now)
		}
		require.NotSame(t, tb, s.Table(), "the inserts grew the table")
		c, created, _ := s.AcquireFrom(cfg, h, now, tb, free)
		require.True(t, created)
		require.Same(t, c, s.Table().Find(h))
		require.Equal(t, int64(101), s.Live())
	})
}

// TestFillerPlacesEveryKey: the filler's slot-without-probing shortcut never overwrites a key or
// puts one where Find cannot reach it, whatever the order the keys come in: sorted by home (the
// shortcut's case), shuffled (the probe's), sorted with runs out of order, and sorted from the
// middle so that the keys past the wrap come first, in tables from nearly empty to nearly full.
func TestFillerPlacesEveryKey(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, words := range []int{1, 2} {
		for _, n := range []uint64{8, 9, 100, 1000} {
			for _, load := range []float64{0.3, 0.8, 0.9, 1.0} {
				for _, order := range []string{"sorted", "shuffled", "nearly", "wrapped"} {
					tb := newTable(n, words, 0)
					keys := make([]uint64, int(float64(n)*load))
					for i := range keys {
						keys[i] = r.Uint64() | 1
					}
					slices.SortFunc(keys, func(a, b uint64) int { return cmp.Compare(tb.home(a), tb.home(b)) })
					switch order {
					case "shuffled":
						r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
					case "nearly":
						for i := 0; i+3 < len(keys); i += 7 {
							keys[i], keys[i+3] = keys[i+3], keys[i]
						}
					case "wrapped":
						keys = append(keys[len(keys)/2:], keys[:len(keys)/2]...)
					}
					f := tb.filler(words)
					for i, k := range keys {
						f.fill(k, uint64(i), uint64(i)+1)
					}
					used := 0
					for i := range tb.n {
						if k, _ := tb.Cell(i); k != 0 {
							used++
						}
					}
					require.Equal(t, len(keys), used, "%s n=%d load=%v: a key was overwritten", order, n, load)
					for i, k := range keys {
						c := tb.Find(k)
						require.NotNil(t, c, "%s n=%d load=%v: key %d lost", order, n, load, i)
						w0, w1 := atomic.Load(c, words)
						require.Equal(t, uint64(i), w0)
						if words == 2 {
							require.Equal(t, uint64(i)+1, w1)
						}
					}
				}
			}
		}
	}
}

// TestChurnAtTheCapRebuildsLess: at the key cap every new key replaces an evicted one, whose slot
// stays taken until a rebuild. Rebuilt at a load of 0.7 instead of 0.8, the table takes about 250
// replacements of its 1,000 keys between rebuilds instead of about 94: 2,000 replacements cost
// at most 10 rebuilds (the 0.8 sizing needs about 21).
func TestChurnAtTheCapRebuildsLess(t *testing.T) {
	s, cfg := newShard(t, 10, true)
	cfg.MaxKeys = 1000
	h := uint64(0)
	next := func() uint64 { h++; return h*0x9e3779b97f4a7c15 | 1 }
	add := func() {
		c, created, _ := s.Acquire(cfg, next(), now)
		require.NotNil(t, c)
		require.True(t, created)
		ok, st := cfg.Codec.Admit(c, now, 1) // a fresh state with no count would be dead
		require.True(t, ok)
		require.Equal(t, atomic.OK, st)
	}
	for range 1000 {
		add()
	}
	c, _, _ := s.Acquire(cfg, next(), now)
	require.Nil(t, c, "the cap is reached")
	h-- // that key was refused: offer it again below

	rebuilds, tb := 0, s.Table()
	for range 2000 {
		var best Candidate
		s.SampleStalest(cfg, now, 10, 16, &best)
		require.True(t, EvictCandidate(cfg, &best))
		add()
		if s.Table() != tb {
			tb = s.Table()
			rebuilds++
			require.GreaterOrEqual(t, tb.Slots(), uint64(s.Live())*10/7, "rebuilt at a load of at most 0.7")
		}
		require.Equal(t, int64(1000), cfg.Keys.Load())
	}
	require.LessOrEqual(t, rebuilds, 10)
	require.Positive(t, rebuilds)
}

// TestEvictionHandsItsPlaceOver: at the cap, EvictCandidateKeep leaves the evicted key's place
// counted, so a plain Acquire of another key is still refused, while AcquireReserved inserts the
// new key into that place; a reserved place for a key found live is given back.
func TestEvictionHandsItsPlaceOver(t *testing.T) {
	s, cfg := newShard(t, 10, true)
	cfg.MaxKeys = 3
	for h := uint64(1); h <= 3; h++ {
		c, created, _ := s.Acquire(cfg, h<<40|1, now)
		require.True(t, created)
		ok, _ := cfg.Codec.Admit(c, now, 1)
		require.True(t, ok)
	}
	var best Candidate
	s.SampleStalest(cfg, now, 10, 16, &best)
	require.True(t, EvictCandidateKeep(cfg, &best))
	require.Equal(t, int64(3), cfg.Keys.Load(), "the place is kept for the new key")
	require.Equal(t, int64(2), s.Live())

	c, _, _ := s.Acquire(cfg, 9<<40|1, now)
	require.Nil(t, c, "another insert cannot take the kept place")
	c, created, _ := s.AcquireReserved(cfg, 4<<40|1, now, nil, 0)
	require.NotNil(t, c)
	require.True(t, created)
	require.Equal(t, int64(3), cfg.Keys.Load())
	require.Equal(t, int64(3), s.Live())

	// A place reserved for a key that turns out to be live already is given back.
	cfg.Keys.Add(1) // as EvictCandidateKeep would leave it
	c, created, _ = s.AcquireReserved(cfg, 4<<40|1, now, nil, 0)
	require.NotNil(t, c)
	require.False(t, created)
	require.Equal(t, int64(3), cfg.Keys.Load())
}

// TestRebuildDropsTheDeadAndKeepsTheLive: a rebuild copies every live key with its counts and
// drops every key dead at its time. The live pattern vouches for the keys written in the
// rebuild's window (they skip Dead's decoding); the keys written two windows before it must still
// reach Dead, and go.
func TestRebuildDropsTheDeadAndKeepsTheLive(t *testing.T) {
	s, cfg := newShard(t, 10, true)
	r := rand.New(rand.NewPCG(7, 8))
	add := func(at int64) uint64 { return addCounted(t, s, cfg, r, at) }
	old := make([]uint64, 3000)
	for i := range old {
		old[i] = add(now)
	}
	later := now + 5_000 // five one-second windows on: the keys above are dead
	live := make([]uint64, 3000)
	for i := range live {
		live[i] = add(later)
	}
	require.False(t, s.Due(later), "the live pattern applies only before the horizon")

	s.mu.Lock()
	tb := s.rebuild(cfg, later, 0)
	s.mu.Unlock()
	require.Equal(t, int64(len(live)), s.Live())
	require.Equal(t, int64(len(live)), cfg.Keys.Load())
	for _, h := range old {
		require.Nil(t, tb.Find(h), "a dead key was copied")
	}
	for _, h := range live {
		c := tb.Find(h)
		require.NotNil(t, c, "a live key was dropped")
		res, _, _ := cfg.Codec.Peek(c, later)
		require.Equal(t, int64(9), res.Remaining)
	}
}

// TestCandidatesKeepTheStalest: a Candidates keeps the keep stalest keys offered, stalest first,
// and among keys of equal age the one offered first ahead.
func TestCandidatesKeepTheStalest(t *testing.T) {
	cs := NewCandidates(3)
	var cells [8]uint64
	for i, age := range []int64{5, 9, 1, 9, 7, 3, 8, 2} {
		cs.offer(Candidate{cell: &cells[i], age: age})
	}
	require.Equal(t, 3, cs.Len())
	require.Equal(t, []int64{9, 9, 8}, []int64{cs.At(0).age, cs.At(1).age, cs.At(2).age})
	require.Same(t, &cells[1], cs.At(0).cell, "the first 9 offered stays ahead")
	require.Same(t, &cells[3], cs.At(1).cell)
	require.Same(t, &cells[6], cs.At(2).cell)

	require.Equal(t, MaxCandidates, NewCandidates(99).keep, "at most MaxCandidates")
	require.Equal(t, 1, NewCandidates(0).keep, "at least one")
}

// TestAdmitFrom: a new or revived key's first request is decided in the state the insert writes
// when the codec is a FreshAdmitter, and left to the caller otherwise: for a key found live, for a
// codec without FreshAdmit, and for AcquireFrom.
func TestAdmitFrom(t *testing.T) {
	s, cfg := newShard(t, 5, true)
	estimate := func(c *uint64) int64 {
		_, pr, st := cfg.Codec.Peek(c, now)
		require.Equal(t, atomic.OK, st)
		return pr.Estimate
	}
	const h, big = uint64(0x1234_5678_9abc_def1), uint64(0x2234_5678_9abc_def1)
	c, at, decided, admitted := s.AdmitFrom(cfg, h, now, 3, nil, 0, false)
	require.NotNil(t, c)
	require.Equal(t, now, at)
	require.True(t, decided, "a new key's first request is decided by the insert")
	require.True(t, admitted)
	require.Equal(t, int64(3), estimate(c), "and counted in its state")

	again, _, decided, _ := s.AdmitFrom(cfg, h, now, 1, nil, 0, false)
	require.Equal(t, c, again)
	require.False(t, decided, "a live key is the caller's to decide")
	require.Equal(t, int64(3), estimate(c), "nothing counted for it")

	c2, _, decided, admitted := s.AdmitFrom(cfg, big, now, 6, nil, 0, false)
	require.True(t, decided)
	require.False(t, admitted, "a first request above the limit is refused")
	require.Equal(t, int64(0), estimate(c2), "and consumes nothing, though the key is tracked")
	require.Equal(t, int64(2), cfg.Keys.Load())

	_, _, ok := atomic.Mark(c, 1, atomic.Dead)
	require.True(t, ok)
	s.addLive(cfg, -1) // as an evictor does
	revived, _, decided, admitted := s.AdmitFrom(cfg, h, now, 2, nil, 0, false)
	require.Equal(t, c, revived, "an evicted key keeps its slot")
	require.True(t, decided, "a revived key's request is decided by the revival")
	require.True(t, admitted)
	require.Equal(t, int64(2), estimate(c), "in a fresh state: the evicted units are gone")
	require.Equal(t, int64(2), cfg.Keys.Load())

	c3, _, _ := s.AcquireFrom(cfg, 0x3234_5678_9abc_def1, now, nil, 0)
	require.Equal(t, int64(0), estimate(c3), "AcquireFrom decides nothing")

	tb := &Config{Codec: atomic.NewTokenBucket(policy.TokenBucket{Rate: 1, Burst: 5}), Keys: new(satomic.Int64)}
	require.NotImplements(t, (*atomic.FreshAdmitter)(nil), tb.Codec, "pick a codec without FreshAdmit")
	var ts Shard
	ts.Init(tb, now)
	c4, _, decided, _ := ts.AdmitFrom(tb, h, now, 3, nil, 0, false)
	require.False(t, decided, "a codec without FreshAdmit leaves the decision to the caller")
	w0, w1 := atomic.Load(c4, tb.Codec.Words())
	f0, f1 := tb.Codec.Fresh(now)
	require.Equal(t, [2]uint64{f0, f1}, [2]uint64{w0, w1}, "the cell holds a new key's state")
}

// addCounted inserts a random new key into s at time at, admits one unit for it there, and
// returns the key.
func addCounted(t *testing.T, s *Shard, cfg *Config, r *rand.Rand, at int64) uint64 {
	t.Helper()
	h := r.Uint64() | 1
	c, created, _ := s.Acquire(cfg, h, at)
	require.True(t, created)
	ok, st := cfg.Codec.Admit(c, at, 1)
	require.True(t, ok)
	require.Equal(t, atomic.OK, st)
	return h
}

// TestShardIsTwoLines: a Shard is two cache lines, what lookups read on the first and what
// inserts write on the second, on every platform (go vet with GOARCH=386 or arm checks the
// 32-bit layouts, where the padding is computed from smaller fields).
func TestShardIsTwoLines(t *testing.T) {
	var s Shard
	if got := unsafe.Sizeof(s); got != 2*lineSize {
		t.Fatalf("a Shard is %d bytes, want two lines of %d", got, lineSize)
	}
	if got := unsafe.Offsetof(s.shardWrite); got != lineSize {
		t.Fatalf("the written half starts at byte %d, want %d", got, lineSize)
	}
}
