package trace_test

import (
	"fmt"

	"github.com/slidelimit/slidelimit/bench/internal/trace"
)

// The registry's generator: the same seed gives the same numbers in every port.
func ExampleNewRNG() {
	r := trace.NewRNG(1)
	fmt.Println(r.NextU32(), r.NextU32(), r.NextU32())
	// Output: 393288148 2174103013 3814759091
}

// Replaying a trace through a limiter that admits everything.
func ExampleReplay() {
	tr, err := trace.Generate(trace.Steady)
	if err != nil {
		panic(err)
	}
	m, err := trace.Replay(tr, func(int64, uint64) bool { return true }, func() int { return 1 })
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Events, m.AcceptRate, m.EntriesTracked)
	// Output: 5491 1 1
}
