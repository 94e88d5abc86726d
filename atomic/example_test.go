package atomic_test

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/atomic"
	"github.com/slidelimit/slidelimit/policy"
)

func ExampleNewSlidingCounter() {
	codec := atomic.NewSlidingCounter(policy.SlidingCounter{Limit: 2, Window: time.Second})
	now := int64(1_764_000_000_000)
	var cell uint64
	cell, _ = codec.Fresh(now)
	for range 3 {
		r, _ := codec.Take(&cell, now, 1)
		fmt.Print(r.Allowed, " ")
	}
	fmt.Println(codec.Words())
	// Output: true true false 1
}
