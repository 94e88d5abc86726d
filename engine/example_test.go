package engine_test

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

func Example() {
	// 100 requests per client in any sliding second.
	l, err := engine.New(policy.SlidingCounter{Limit: 100, Window: time.Second})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	if l.Allow("203.0.113.7") {
		fmt.Println("served")
	}
	// Output: served
}

func ExampleLimiter_Take() {
	// A manual clock makes the example deterministic; production code uses the default.
	clk := clock.NewManual(1_764_000_000_000)
	l, _ := engine.New(policy.SlidingCounter{Limit: 3, Window: time.Second}, engine.WithClock(clk))
	defer l.Close()

	for range 4 {
		d := l.Take("user:42", 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter, d.Reason)
	}
	// Output:
	// true 2 0s ok
	// true 1 0s ok
	// true 0 0s ok
	// false 0 1.001s limited
}

func ExampleLimiter_AllowKey() {
	l, _ := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Minute})
	defer l.Close()
	const connID = 7 // the caller's own integer id
	fmt.Println(l.AllowKey(connID, 1), l.AllowKey(connID, 1), l.AllowKey(connID, 1))
	// Output: true true false
}

func ExampleWithMaxKeys() {
	clk := clock.NewManual(1_764_000_000_000)
	l, _ := engine.New(policy.SlidingCounter{Limit: 10, Window: time.Second},
		engine.WithClock(clk), engine.WithMaxKeys(2))
	defer l.Close()
	l.Allow("a")
	l.Allow("b")
	fmt.Println(l.Take("c", 1).Reason)
	// Output: key cap reached
}
