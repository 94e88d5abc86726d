package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

func Example() {
	// About 100 requests per client per sliding second (see policy.SlidingCounter).
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

func ExampleLimiter_PeekN() {
	clk := clock.NewManual(1_764_000_000_000)
	l, _ := engine.New(policy.TokenBucket{Rate: 1, Burst: 10}, engine.WithClock(clk))
	defer l.Close()

	l.Take("user:42", 7) // 3 tokens left
	for _, n := range []int64{1, 5} {
		d := l.PeekN("user:42", n)
		fmt.Println(n, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// 1 true 3 0s
	// 5 false 3 2s
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

func ExampleWithExpectedKeys() {
	// A gateway that tracks about a million clients takes the memory for them at start, so that
	// no shard pauses to grow while they arrive.
	l, err := engine.New(policy.SlidingCounter{Limit: 100, Window: time.Minute}, engine.WithExpectedKeys(1_000_000))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	var before, after engine.Stats
	l.Stats(&before)
	for client := range uint64(1_000_000) {
		l.AllowKey(client, 1)
	}
	l.Stats(&after)
	fmt.Println(after.Keys, before.TableBytes/1_000_000, "bytes per expected key;", "grew:", after.TableBytes != before.TableBytes)
	// Output: 1000000 21 bytes per expected key; grew: false
}

func ExampleLimiter_Wait() {
	// 10 calls per second to an upstream API: callers wait their turn instead of failing.
	l, _ := engine.New(policy.SlidingCounter{Limit: 10, Window: time.Second})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Wait(ctx, "upstream", 1); err != nil {
		fmt.Println("gave up:", err)
		return
	}
	fmt.Println("calling upstream")
	// Output: calling upstream
}

func ExampleLimiter_TakeWithLimit() {
	clk := clock.NewManual(1_764_000_000_000)
	// 100 per minute by default; cells sized for tenants allowed up to 10,000.
	l, _ := engine.New(policy.SlidingCounter{Limit: 100, Window: time.Minute},
		engine.WithClock(clk), engine.WithMaxLimit(10_000))
	defer l.Close()
	fmt.Println(l.Take("tenant:free", 150).Allowed)
	fmt.Println(l.TakeWithLimit("tenant:premium", 150, 10_000).Allowed)
	// Output:
	// false
	// true
}

func ExampleLimiter_Refund() {
	clk := clock.NewManual(1_764_000_000_000)
	l, _ := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Second}, engine.WithClock(clk))
	defer l.Close()
	d := l.Take("user:7", 1)
	upstreamFailed := true
	if upstreamFailed {
		l.Refund("user:7", 1, d) // limit on successes: a failed call costs nothing
	}
	fmt.Println(l.Take("user:7", 2).Allowed)
	// Output: true
}

func ExampleAll() {
	clk := clock.NewManual(1_764_000_000_000)
	perSecond, _ := engine.New(policy.SlidingCounter{Limit: 10, Window: time.Second}, engine.WithClock(clk))
	defer perSecond.Close()
	perHour, _ := engine.New(policy.SlidingCounter{Limit: 1000, Window: time.Hour}, engine.WithClock(clk))
	defer perHour.Close()
	both, _ := engine.All(perSecond, perHour)

	admitted := 0
	for range 15 {
		if both.Allow("api-key-1") {
			admitted++
		}
	}
	pr, _ := perHour.Inspect("api-key-1")
	fmt.Println(admitted, pr.Estimate) // the 5 refused requests left nothing charged per hour
	// Output: 10 10
}

func ExampleLimiter_AllowBatch() {
	l, _ := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Second})
	defer l.Close()

	// The source addresses of one read batch, in arrival order; a repeated key is counted once
	// per occurrence, as one Allow call each would count it.
	keys := []string{"198.51.100.1", "198.51.100.2", "198.51.100.1", "198.51.100.1"}
	out := make([]bool, len(keys))
	l.AllowBatch(keys, 1, out)
	fmt.Println(out)
	// Output: [true true true false]
}
