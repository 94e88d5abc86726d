package redispeers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/slidelimit/slidelimit/policy"
)

// Example checks what the benchmarks take for granted: on the same redis-server, each library
// holds a key to its limit. Of four requests for one key within a minute, at 3 a minute, each
// admits three and refuses the fourth.
func Example() {
	ctx := context.Background()
	c := newClient()
	defer c.Close()
	if err := c.FlushDB(ctx).Err(); err != nil {
		panic(err)
	}
	for _, lib := range []struct {
		name string
		d    decider
	}{
		{"slidelimit", newSlide(policy.SlidingCounter{Limit: 3, Window: time.Minute})},
		{"redis_rate", newRRate(redis_rate.PerMinute(3))},
		{"httprate-redis", newHRate(3, time.Minute, 1)},
	} {
		var got []bool
		for range 4 {
			ok, err := lib.d.decide(ctx, 0, 0)
			if err != nil {
				panic(err)
			}
			got = append(got, ok)
		}
		lib.d.close()
		fmt.Println(lib.name, got)
	}
	// Output:
	// slidelimit [true true true false]
	// redis_rate [true true true false]
	// httprate-redis [true true true false]
}
