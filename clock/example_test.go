package clock_test

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/clock"
)

func ExampleNewManual() {
	c := clock.NewManual(1_764_000_000_000)
	c.Advance(1500 * time.Millisecond)
	fmt.Println(c.Now())
	// Output: 1764000001500
}
