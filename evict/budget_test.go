package evict

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	slatomic "github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/shard"
)

// A tick visits interval/period of the slots, rounded up, so that every key is visited about once
// per period even when the period is not a whole number of intervals.
func TestBudgetIsTheIntervalsShareOfThePeriod(t *testing.T) {
	cfg := &shard.Config{
		Codec: slatomic.NewSlidingCounter(policy.SlidingCounter{Limit: 5, Window: time.Second}),
		Keys:  new(atomic.Int64),
	}
	shards := make([]shard.Shard, 1)
	shards[0].Init(cfg, 0)
	for h := uint64(1); h <= 40_000; h++ {
		shards[0].Acquire(cfg, h*0x9e3779b97f4a7c15|1, 0)
	}
	slots := shards[0].Table().Slots()
	for _, tc := range []struct {
		interval, period time.Duration
		num, den         uint64 // the share, interval/period
	}{
		{1100 * time.Millisecond, 2 * time.Second, 11, 20},
		{time.Second, 2 * time.Second, 1, 2},
		{700 * time.Millisecond, 2 * time.Second, 7, 20},
		{time.Minute, time.Minute, 1, 1},
	} {
		s := New(shards, cfg, clock.NewManual(0))
		s.interval, s.period = tc.interval, tc.period
		want := (slots*tc.num + tc.den - 1) / tc.den
		if got := s.budget(s.slots()); got != want {
			t.Errorf("interval %v, period %v, %d slots: budget %d, want %d", tc.interval, tc.period, slots, got, want)
		}
	}
}

// The pace cap, MaxSlotsPerSecond × interval, holds for intervals of hours: computed as a Duration
// product it overflowed from about 1h42m, and from 3h25m to 5h7m it wrapped to a small figure that
// cut each tick's visits far below the table.
func TestBudgetLongIntervals(t *testing.T) {
	s := New(nil, &shard.Config{}, clock.NewManual(0))
	for _, d := range []time.Duration{2 * time.Hour, 3*time.Hour + 24*time.Minute + 58046*time.Millisecond, 4 * time.Hour, 5 * time.Hour, 100 * time.Hour} {
		s.interval, s.period = d, d
		if got := s.budget(1_000_000); got != 1_000_000 {
			t.Errorf("interval %v: budget of 1e6 slots = %d, want all of them", d, got)
		}
		if got := s.budget(1 << 62); got != uint64(MaxSlotsPerSecond*d.Seconds()) {
			t.Errorf("interval %v: budget of 2^62 slots = %d, want the pace cap %d", d, got, uint64(MaxSlotsPerSecond*d.Seconds()))
		}
	}
}

// An idle limiter (no key, every table at its smallest) is not swept: its shards' horizons are
// left to pass, a decision there would sweep its own shard. Once a key arrives the sweeper runs
// again and renews them: at once when the first key wakes it (shard.Config.FirstKey, here with a
// period of an hour), and otherwise within a period. Tables sized up front
// (shard.Config.ExpectedKeys) are at their smallest too.
func TestIdleLimiterIsNotSwept(t *testing.T) {
	for _, c := range []struct {
		name     string
		period   time.Duration
		firstKey chan struct{}
		expected uint64
	}{
		{"woken by its first key", time.Hour, make(chan struct{}, 1), 0},
		{"a period later", 2 * time.Second, nil, 0},
		{"presized, a period later", 2 * time.Second, nil, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := &shard.Config{
				// A limit of 21 bits leaves a window index of 20, so the horizon is finite (about
				// 6 days).
				Codec:        slatomic.NewSlidingCounter(policy.SlidingCounter{Limit: 1 << 20, Window: time.Second}),
				Evict:        true,
				Keys:         new(atomic.Int64),
				FirstKey:     c.firstKey,
				ExpectedKeys: c.expected,
			}
			shards := make([]shard.Shard, 4)
			for i := range shards {
				shards[i].Init(cfg, 0)
			}
			clk := clock.NewManual(0)
			late := cfg.Codec.Horizon() + 1
			clk.Set(late) // every shard's horizon has passed
			s := Start(shards, cfg, clk, time.Millisecond, c.period)
			defer s.Stop()
			time.Sleep(50 * time.Millisecond) // about 50 ticks: idle since the first
			for i := range shards {
				if !shards[i].Due(late) {
					t.Fatalf("shard %d was swept while the limiter held no key", i)
				}
			}
			// A counted request keeps the key live: a key with nothing counted is dead at once,
			// and the sweep of a presized limiter (5,004 slots) outlasts one tick's 4,096.
			c, _, _ := shards[0].Acquire(cfg, 42, late)
			if ok, st := cfg.Codec.Admit(c, late, 1); !ok || st != slatomic.OK {
				t.Fatalf("the first request was refused (%v)", st)
			}
			deadline := time.Now().Add(10 * time.Second) // a failsafe: without the wake-up, an hour
			for i := range shards {
				for shards[i].Due(late) {
					if time.Now().After(deadline) {
						t.Fatalf("shard %d not swept 10s after the first key arrived", i)
					}
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
}

// An interval of 0 or less, which a ticker would refuse by panicking in the sweeper's goroutine,
// is taken as MinInterval: the sweeper runs, sweeps a shard whose horizon has passed, and stops.
func TestStartClampsTheInterval(t *testing.T) {
	for _, interval := range []time.Duration{0, -time.Second, time.Nanosecond} {
		cfg := &shard.Config{
			Codec: slatomic.NewSlidingCounter(policy.SlidingCounter{Limit: 1 << 20, Window: time.Second}),
			Evict: true,
			Keys:  new(atomic.Int64),
		}
		shards := make([]shard.Shard, 1)
		shards[0].Init(cfg, 0)
		clk := clock.NewManual(0)
		late := cfg.Codec.Horizon() + 1
		clk.Set(late)
		c, _, _ := shards[0].Acquire(cfg, 42, late)
		if ok, st := cfg.Codec.Admit(c, late, 1); !ok || st != slatomic.OK {
			t.Fatalf("the first request was refused (%v)", st)
		}
		s := Start(shards, cfg, clk, interval, 0)
		if s.interval != MinInterval {
			t.Errorf("interval %v: the sweeper ticks every %v, want %v", interval, s.interval, MinInterval)
		}
		deadline := time.Now().Add(10 * time.Second)
		for shards[0].Due(late) {
			if time.Now().After(deadline) {
				t.Fatalf("interval %v: the shard was not swept in 10s", interval)
			}
			time.Sleep(time.Millisecond)
		}
		s.Stop()
	}
}

// A step's budget is bounded by what is left of the table, so that the largest budget does not
// wrap past it: after a step of one slot, Step(MaxUint64) swept nothing and moved the sweeper back.
func TestStepHugeBudget(t *testing.T) {
	cfg := &shard.Config{
		Codec: slatomic.NewSlidingCounter(policy.SlidingCounter{Limit: 5, Window: time.Second}),
		Keys:  new(atomic.Int64),
		Evict: true,
	}
	shards := make([]shard.Shard, 1)
	shards[0].Init(cfg, 0)
	for h := uint64(1); h <= 5; h++ {
		c, _, _ := shards[0].Acquire(cfg, h*0x9e3779b97f4a7c15|1, 0)
		if ok, st := cfg.Codec.Admit(c, 0, 1); !ok || st != slatomic.OK {
			t.Fatalf("key %d: the first request was refused (%v)", h, st)
		}
	}
	clk := clock.NewManual(0)
	s := New(shards, cfg, clk)
	s.Step(1)
	clk.Set(5_000) // five one-second windows on: every key is dead
	s.Step(math.MaxUint64)
	// The step goes on from slot 1 to the table's end (one round per step at most).
	tb := shards[0].Table()
	var want int64
	for i := uint64(1); i < tb.Slots(); i++ {
		if k, _ := tb.Cell(i); k != 0 {
			want++
		}
	}
	if got := s.evicted.Load(); got != want || want == 0 {
		t.Fatalf("Step(MaxUint64) evicted %d of the %d dead keys past slot 0", got, want)
	}
}
