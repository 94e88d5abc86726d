package rules_test

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/internal/rules"
)

// Unix milliseconds; every example passes time in explicitly, as the engine does.
const exampleNow = int64(1_700_000_000_000)

func ExampleTokenBucket() {
	p := rules.TokenBucket{Rate: 2, Burst: 3} // 2 tokens a second, bursts of up to 3
	s := p.Fresh(exampleNow)                  // a new key starts full
	for range 4 {
		r := p.Take(&s, exampleNow, 1)
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfterMs)
	}
	r := p.Take(&s, exampleNow+500, 1) // half a second later: one token back
	fmt.Println(r.Allowed, r.Remaining)
	// Output:
	// true 2 0
	// true 1 0
	// true 0 0
	// false 0 500
	// true 0
}

func ExampleGCRA() {
	p := rules.GCRA{Rate: 2, Burst: 3} // the token bucket above, in one int64 per key
	fmt.Println(p.CheckCost(4))        // the engine refuses this before looking the key up
	s := p.Fresh(exampleNow)
	for range 4 {
		r := p.Take(&s, exampleNow, 1)
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfterMs)
	}
	fmt.Println(p.Take(&s, exampleNow+500, 1).Allowed)
	// Output:
	// false
	// true 2 0
	// true 1 0
	// true 0 0
	// false 0 500
	// true
}

func ExampleSlidingLog() {
	p := rules.SlidingLog{Limit: 3, Window: 15 * time.Minute} // 3 login attempts in any 15 minutes
	s := p.Fresh(exampleNow)
	for _, minute := range []int64{0, 1, 2, 3} {
		r := p.Take(&s, exampleNow+minute*60_000, 1)
		fmt.Println(r.Allowed, r.Remaining, time.Duration(r.RetryAfterMs)*time.Millisecond)
	}
	_, probe := p.Peek(s, exampleNow+15*60_000) // the attempt at minute 0 has left the window
	fmt.Println(probe.Count, p.StateBytes())
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 12m0s
	// 2 52
}

func ExampleFixedWindow() {
	p := rules.FixedWindow{Limit: 2, Window: time.Second}
	edge := exampleNow - exampleNow%1000 + 1000
	s := p.Fresh(edge - 1)
	for _, now := range []int64{edge - 1, edge - 1, edge - 1, edge, edge} {
		r := p.Take(&s, now, 1)
		fmt.Println(r.Allowed, r.RetryAfterMs, r.ResetAtMs-edge)
	}
	// Output:
	// true 0 0
	// true 0 0
	// false 1 0
	// true 0 1000
	// true 0 1000
}

func ExampleLeakyBucket() {
	p := rules.LeakyBucket{Rate: 1, Capacity: 2} // drains one unit a second, holds two
	s := p.Fresh(exampleNow)
	fmt.Println(p.Take(&s, exampleNow, 2).Allowed)
	r := p.Take(&s, exampleNow, 1)
	fmt.Println(r.Allowed, r.RetryAfterMs, r.ResetAtMs-exampleNow)
	_, probe := p.Peek(s, exampleNow+1000)
	fmt.Println(probe.Level)
	// Output:
	// true
	// false 1000 2000
	// 1
}

func ExampleDualBucket() {
	p := rules.DualBucket{RequestsPerMin: 3, TokensPerMin: 1000} // 3 calls and 1000 model tokens a minute
	s := p.Fresh(exampleNow)
	fmt.Println(p.Take(&s, exampleNow, 600).Allowed)
	r := p.Take(&s, exampleNow, 600) // 400 tokens left: 200 more take 200*60000/1000 ms
	fmt.Println(r.Allowed, r.RetryAfterMs)
	fmt.Println(p.Take(&s, exampleNow, 0).Allowed) // cost 0 still spends a request
	_, probe := p.Peek(s, exampleNow)
	fmt.Println(probe.Requests, probe.Tokens)
	// Output:
	// true
	// false 12000
	// true
	// 1 400
}
