// Package evict runs the background sweeper that keeps an engine's memory bounded: it walks the
// shards incrementally, a bounded number of slots per tick, and removes only state that is
// identical to a new key's, so eviction can never change a decision.
//
// The sweeper holds no shard lock while it visits slots; a cell it judges dead is marked Dead by a
// compare-and-swap that fails if the state changed since, and an updater that then finds the mark
// revives the key's cell under the shard lock instead of writing into an orphan. When a pass over a
// shard completes, the shard's sweep horizon is renewed and a table left mostly empty is rebuilt
// smaller, which is how the heap falls back after a burst of keys.
//
// It is a building block of package engine, which starts one sweeper per limiter (WithEviction,
// WithSweepInterval); a program that limits rates uses engine, and nothing here is needed for
// that. Eviction at the key cap (engine.WithAtCap) is the engine's, not this package's: it is the
// one eviction that may forget units a key still holds.
package evict

import (
	"math"
	"sync"
	satomic "sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/shard"
)

// Sweeper is a running background sweeper. Evicted and Stop are safe for concurrent use, with
// each other and with the sweeper's goroutine; Step is not (see Step).
type Sweeper struct {
	shards   []shard.Shard
	cfg      *shard.Config
	clk      *clock.Clock
	interval time.Duration
	period   time.Duration

	evicted satomic.Int64
	round   uint64 // slots per tick for the current round (the sweeper goroutine's own)

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	// The walk: the shard being swept, its table at the start of the pass, and the position.
	cur       int
	table     *shard.Table
	pos       uint64
	passStart int64
}

// MinInterval is the shortest interval between a Sweeper's ticks.
const MinInterval = time.Millisecond

// minBudget is the fewest slots a tick visits, so small tables are swept in one tick.
const minBudget = 4096

// Start begins sweeping: every interval it visits about a (interval/P) share of all slots, where P
// is max(period, interval), so every key is visited about once per P: once per period, or once per
// interval when the interval is the longer. A tick visits at most MaxSlotsPerSecond × interval
// slots (but at least 4,096), so larger tables take longer. A tick that finds no key and every
// table at its smallest does nothing, and the next comes a period later, or as soon as a key
// arrives if cfg.FirstKey is set (see shard.Config). An interval below MinInterval (0 or negative
// included) is taken as MinInterval, the least engine.WithSweepInterval accepts: a ticker refuses
// one of 0 or less by panicking, which in the sweeper's own goroutine no caller could recover.
// Stop ends it. The sweeper's goroutine works alongside the limiter's decisions, as every sweep
// does (see shard.Shard.SweepRange); Start itself must be called once the shards are initialised.
func Start(shards []shard.Shard, cfg *shard.Config, clk *clock.Clock, interval, period time.Duration) *Sweeper {
	interval = max(interval, MinInterval)
	s := &Sweeper{
		shards: shards, cfg: cfg, clk: clk, interval: interval, period: max(period, interval),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go s.run()
	return s
}

func (s *Sweeper) run() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	idle := false
	for {
		select {
		case <-s.stop:
			return
		case <-s.cfg.FirstKey:
			if idle {
				// A key arrived: back to the interval, from this instant.
				idle = false
				t.Reset(s.interval)
			}
		case <-t.C:
			slots := s.slots()
			if s.cfg.Keys.Load() == 0 && slots == uint64(len(s.shards))*s.cfg.MinTable() {
				// Nothing to evict and no table to shrink. An idle limiter sweeps nothing and
				// looks again only once a period, or when its first key arrives (cfg.FirstKey),
				// so that a process holding thousands of them (a proxy's rules) idles; without
				// FirstKey a key that arrives meanwhile waits at most a period for its first
				// visit, and a decision in a shard whose horizon passed sweeps that shard itself,
				// as it always may.
				if !idle {
					idle = true
					t.Reset(s.period)
				}
				continue
			}
			if idle {
				idle = false
				t.Reset(s.interval)
			}
			// The budget never falls within a round, so that shards shrunk early in a round do
			// not slow the rest of it down (dead keys would otherwise go in ever smaller steps);
			// it still rises at once when tables grow.
			b := s.budget(slots)
			if s.cur == 0 && s.table == nil {
				s.round = b
			}
			s.round = max(s.round, b)
			s.Step(s.round)
		}
	}
}

// slots returns the slots of every shard's table.
func (s *Sweeper) slots() uint64 {
	var slots uint64
	for i := range s.shards {
		slots += s.shards[i].Table().Slots()
	}
	return slots
}

// budget returns the slots a tick visits when the shards' tables hold slots in all.
func (s *Sweeper) budget(slots uint64) uint64 {
	// slots × interval/period, rounded up. Dividing by the whole ticks per period instead would
	// visit every slot each tick for any period under twice the interval (2s over 1.1s is 1).
	share := uint64(math.Ceil(float64(slots) * float64(s.interval) / float64(s.period)))
	// In floating point: MaxSlotsPerSecond × an interval above 1h42m overflows a Duration.
	limit := uint64(min(MaxSlotsPerSecond*s.interval.Seconds(), math.MaxUint64/2))
	return max(min(share, limit), minBudget)
}

// MaxSlotsPerSecond bounds the sweeper's pace. A visit costs a few nanoseconds, most of it the
// memory the table streams through, so this keeps the sweeper near 1% of a core however large the
// tables grow; a table of more slots than this takes more than one sweep period to visit. A tick
// still visits at least 4,096 slots, so with intervals under about 2.7 ms (4,096 / 1.5M a second)
// it goes faster than this. It is exported as the figure engine.WithSweepInterval documents; programs need not use it.
const MaxSlotsPerSecond = 1_500_000

// Step visits up to budget slots, continuing where the last step stopped. The sweeper's goroutine
// calls it on every tick; it must not be called concurrently with itself (tests that drive a
// sweeper by hand construct it with New instead of Start).
func (s *Sweeper) Step(budget uint64) {
	now := s.clk.Background() // a sweep alone must not keep the clock ticking
	for budget > 0 {
		sh := &s.shards[s.cur]
		if s.table == nil {
			s.table, s.pos, s.passStart = sh.Table(), 0, now
		}
		end := s.pos + min(budget, s.table.Slots()-s.pos) // budget + pos could wrap
		s.evicted.Add(int64(sh.SweepRange(s.cfg, s.table, s.pos, end, now)))
		budget -= end - s.pos
		s.pos = end
		if s.pos >= s.table.Slots() {
			sh.Swept(s.cfg, s.table, s.passStart, now)
			s.table = nil
			s.cur = (s.cur + 1) % len(s.shards)
			if s.cur == 0 {
				return // one full round per step at most, so a tiny engine is not spun over
			}
		}
	}
}

// New returns a sweeper that does nothing until Step is called: for tests that drive sweeping by
// hand, deterministically. It starts no goroutine.
func New(shards []shard.Shard, cfg *shard.Config, clk *clock.Clock) *Sweeper {
	return &Sweeper{shards: shards, cfg: cfg, clk: clk}
}

// Evicted returns the number of keys the sweeper has evicted. One atomic load: safe for concurrent
// use with Stop and with the sweeper's goroutine, whose step in progress it may not count yet.
func (s *Sweeper) Evicted() int64 { return s.evicted.Load() }

// Stop ends the sweeper's goroutine and waits for it. It is idempotent.
func (s *Sweeper) Stop() {
	if s.stop == nil {
		return
	}
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
}
