package batched_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore/batched"
)

// The test harness starts redis-server and sets REDIS_ADDR.
func redisAddr() string {
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a
	}
	return "localhost:6379"
}

// Every process that builds this limiter on the same Redis shares one limit of 3 per second per
// key; each decides in process from the quota it leases.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr:                  redisAddr(),
		ContextTimeoutEnabled: true, // lets the limiter's deadline bound every call
	})
	defer client.Close()

	// A manual clock makes this output reproducible; without WithClock the limiter reads the
	// process's coarse clock.
	clk := clock.NewManual(1_760_000_000_000)
	l, err := batched.New(client, "example", policy.SlidingCounter{Limit: 3, Window: time.Second},
		batched.WithClock(clk), batched.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer l.Close()

	ctx := context.Background()
	for range 4 {
		d, err := l.Take(ctx, "user:42", 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter, d.Reason, err)
	}
	// Output:
	// true 2 0s ok <nil>
	// true 1 0s ok <nil>
	// true 0 0s ok <nil>
	// false 0 1.001s limited <nil>
}
