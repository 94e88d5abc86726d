package slidelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
)

// serve is written once against the interface: the same code runs on the in-process engine, on
// Redis, or on the batched fleet mode.
func serve(ctx context.Context, lim slidelimit.Limiter, client string) string {
	d, err := lim.Take(ctx, client, 1)
	switch {
	case err != nil:
		return "store unavailable: " + err.Error()
	case !d.Allowed:
		return fmt.Sprintf("429, retry in %v", d.RetryAfter)
	}
	return fmt.Sprintf("200, %d left", d.Remaining)
}

func Example() {
	clk := clock.NewManual(1_764_000_000_000) // pinned time, so that the output is exact
	l, err := engine.New(policy.SlidingCounter{Limit: 2, Window: time.Second}, engine.WithClock(clk))
	if err != nil {
		panic(err)
	}
	defer l.Close()

	lim := l.AsLimiter()
	for range 3 {
		fmt.Println(serve(context.Background(), lim, "203.0.113.7"))
	}
	// Output:
	// 200, 1 left
	// 200, 0 left
	// 429, retry in 1.001s
}

func ExampleParseFailureMode() {
	m, err := slidelimit.ParseFailureMode("closed")
	fmt.Println(m, err)
	_, err = slidelimit.ParseFailureMode("shut")
	fmt.Println(err)
	// Output:
	// closed <nil>
	// slidelimit: failure mode "shut": want open, closed or local (or fail-open, fail-closed, fallback)
}
