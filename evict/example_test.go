package evict_test

import (
	"fmt"
	"sync/atomic"
	"time"

	slatomic "github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/evict"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/shard"
)

func ExampleSweeper_Step() {
	clk := clock.NewManual(0)
	cfg := &shard.Config{
		Codec: slatomic.NewSlidingCounter(policy.SlidingCounter{Limit: 5, Window: time.Second}),
		Evict: true,
		Keys:  new(atomic.Int64),
	}
	shards := make([]shard.Shard, 1)
	shards[0].Init(cfg, 0)
	cell, _, _ := shards[0].Acquire(cfg, 42, 0)
	cfg.Codec.Take(cell, 0, 3)

	s := evict.New(shards, cfg, clk)
	clk.Set(1000) // the next window: its 3 units still weigh on the estimate
	s.Step(1024)
	fmt.Println("after one window:", cfg.Keys.Load())
	clk.Set(2000) // two windows untouched: identical to a new key
	s.Step(1024)
	fmt.Println("after two windows:", cfg.Keys.Load(), "evicted:", s.Evicted())
	// Output:
	// after one window: 1
	// after two windows: 0 evicted: 1
}
