package shard_test

import (
	"fmt"
	"sync/atomic"
	"time"

	slatomic "github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/shard"
)

func ExampleShard_Acquire() {
	cfg := &shard.Config{
		Codec: slatomic.NewSlidingCounter(policy.SlidingCounter{Limit: 5, Window: time.Second}),
		Keys:  new(atomic.Int64),
	}
	var s shard.Shard
	s.Init(cfg, 0)
	cell, created, _ := s.Acquire(cfg, 0xfeed, 0)
	fmt.Println(created, s.Table().Find(0xfeed) == cell, cfg.Keys.Load())
	// Output: true true 1
}
