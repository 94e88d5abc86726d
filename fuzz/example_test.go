package fuzz

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/reference"
	"github.com/slidelimit/slidelimit/policy"
)

// Example is what every serial target does with the operations it decodes, written out by hand:
// the same requests, at the same times, through the engine on a manual clock and through the
// reference model, whose answers must agree. Here a sliding window counter of 3 a second: the
// fourth request in the first window is refused; 1.2 s later, half way through the next window,
// the first one's 3 units weigh floor(3 × 0.5) = 1 (docs/policies.md), so two more fit and the
// third does not.
func Example() {
	clk := clock.NewManual(1_000_000)
	defer clk.Stop()
	lim, err := engine.New(policy.SlidingCounter{Limit: 3, Window: time.Second}, engine.WithClock(clk), engine.WithEviction(false))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	model, err := reference.New(reference.SlidingCounter, map[string]int64{"limit": 3, "windowMs": 1000})
	if err != nil {
		panic(err)
	}
	for _, step := range []int64{0, 100, 100, 100, 1200, 0, 0} {
		clk.Advance(time.Duration(step) * time.Millisecond)
		got, want := lim.AllowKey(7, 1), model.Allow(7, 1, clk.Now())
		fmt.Printf("+%4d ms: engine %-5v model %v\n", step, got, want)
	}
	// Output:
	// +   0 ms: engine true  model true
	// + 100 ms: engine true  model true
	// + 100 ms: engine true  model true
	// + 100 ms: engine false model false
	// +1200 ms: engine true  model true
	// +   0 ms: engine true  model true
	// +   0 ms: engine false model false
}
