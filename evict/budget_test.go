package evict

import (
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
		if got := s.budget(); got != want {
			t.Errorf("interval %v, period %v, %d slots: budget %d, want %d", tc.interval, tc.period, slots, got, want)
		}
	}
}
