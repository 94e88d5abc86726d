package policy_test

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// A manual clock makes the examples deterministic; production code uses the engine's default.
// The start is a whole second, so window edges fall on round figures.
const start = int64(1_700_000_000_000)

// newLimiter runs p in process on a manual clock starting at start.
func newLimiter(p policy.Policy) (*engine.Limiter, *clock.Clock) {
	clk := clock.NewManual(start)
	l, err := engine.New(p, engine.WithClock(clk))
	if err != nil {
		panic(err)
	}
	return l, clk
}

func Example() {
	// About 100 requests per client per sliding minute (see policy.SlidingCounter).
	p := policy.SlidingCounter{Limit: 100, Window: time.Minute}
	l, err := engine.New(p)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	fmt.Println(p.ID(), l.Allow("203.0.113.7"))
	// Output: sliding-counter true
}

func ExamplePolicy_Validate() {
	// engine.New and redisstore.New run the same check and return the same error.
	bad := []policy.Policy{
		policy.SlidingCounter{Limit: 0, Window: time.Second},
		policy.SlidingCounter{Limit: 10, Window: 1500 * time.Microsecond},
		policy.SlidingLog{Limit: policy.MaxLogLimit + 1, Window: time.Minute},
		policy.TokenBucket{Rate: 5, Burst: 0},
	}
	for _, p := range bad {
		fmt.Println(p.Validate())
	}
	// Output:
	// policy: SlidingCounter.Limit = 0 out of range [1, 4294967295]
	// policy: SlidingCounter.Window = 1.5ms is not a whole number of milliseconds
	// policy: SlidingLog.Limit = 10001 out of range [1, 10000]
	// policy: TokenBucket.Burst = 0 out of range [1, 4294967295]
}

func ExampleSlidingCounter() {
	l, clk := newLimiter(policy.SlidingCounter{Limit: 4, Window: time.Second})
	defer l.Close()
	fmt.Println(l.Take("k", 4).Allowed) // the whole window's limit at once
	clk.Advance(1250 * time.Millisecond)
	// A quarter into the next window, 3/4 of the previous window's 4 units still weigh: 3.
	d := l.Take("k", 2)
	fmt.Println(d.Allowed, d.Remaining)
	probe, _ := l.Inspect("k")
	fmt.Println(probe.Estimate)
	// Output:
	// true
	// false 1
	// 3
}

func ExampleTokenBucket() {
	l, clk := newLimiter(policy.TokenBucket{Rate: 2, Burst: 3}) // 2 tokens a second, bursts of up to 3
	defer l.Close()
	for range 4 {
		d := l.Take("k", 1) // a new key starts full
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	clk.Advance(500 * time.Millisecond) // half a second later: one token back
	fmt.Println(l.Take("k", 1).Allowed)
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 500ms
	// true
}

func ExampleGCRA() {
	l, _ := newLimiter(policy.GCRA{Rate: 2, Burst: 3}) // the token bucket above, in one word per key
	defer l.Close()
	d := l.Take("k", 4) // above Burst: can never be admitted, so it creates no state
	fmt.Println(d.Allowed, d.Reason, l.Len())
	for range 4 {
		d := l.Take("k", 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// false cost above limit 0
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 500ms
}

func ExampleSlidingLog() {
	l, clk := newLimiter(policy.SlidingLog{Limit: 3, Window: 15 * time.Minute}) // 3 login attempts in any 15 minutes
	defer l.Close()
	for range 4 {
		d := l.Take("alice", 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
		clk.Advance(time.Minute)
	}
	// Now at minute 4; at minute 15 the attempt at minute 0 has left the window.
	clk.Advance(11 * time.Minute)
	probe, _ := l.Inspect("alice")
	fmt.Println(probe.Count)
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 12m0s
	// 2
}

func ExampleFixedWindow() {
	l, clk := newLimiter(policy.FixedWindow{Limit: 2, Window: time.Second})
	defer l.Close()
	clk.Advance(999 * time.Millisecond) // the last millisecond of a window
	for range 3 {
		d := l.Take("k", 1)
		fmt.Println(d.Allowed, d.RetryAfter)
	}
	clk.Advance(time.Millisecond) // the next window starts from zero: the edge burst
	fmt.Println(l.Take("k", 1).Allowed, l.Take("k", 1).Allowed)
	// Output:
	// true 0s
	// true 0s
	// false 1ms
	// true true
}

func ExampleLeakyBucket() {
	l, clk := newLimiter(policy.LeakyBucket{Rate: 1, Capacity: 2}) // drains one unit a second, holds two
	defer l.Close()
	fmt.Println(l.Take("k", 2).Allowed)
	d := l.Take("k", 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	clk.Advance(time.Second)
	probe, _ := l.Inspect("k")
	fmt.Println(probe.Level)
	// Output:
	// true
	// false 1s
	// 1
}

func ExampleDualBucket() {
	l, _ := newLimiter(policy.DualBucket{RequestsPerMin: 3, TokensPerMin: 1000}) // 3 calls and 1000 model tokens a minute
	defer l.Close()
	fmt.Println(l.Take("k", 600).Allowed)
	d := l.Take("k", 600) // 400 tokens left: 200 more take 200*60000/1000 ms
	fmt.Println(d.Allowed, d.RetryAfter)
	fmt.Println(l.Take("k", 0).Allowed) // cost 0 still spends a request
	probe, _ := l.Inspect("k")
	fmt.Println(probe.Requests, probe.Tokens)
	// Output:
	// true
	// false 12s
	// true
	// 1 400
}
