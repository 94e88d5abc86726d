package peers_test

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/bench/peers"
)

// Every limiter is built from one Config and asked the same question.
func ExampleNew() {
	for _, name := range []string{peers.Slidelimit, peers.XTimeRate} {
		l, err := peers.New(name, peers.Config{Limit: 2, Window: time.Minute})
		if err != nil {
			panic(err)
		}
		fmt.Println(name, l.Allow("10.0.0.1"), l.Allow("10.0.0.1"), l.Allow("10.0.0.1"))
		_ = l.Close()
	}
	// Output:
	// slidelimit true true false
	// x-time-rate true true false
}
