package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
)

// The test harness starts redis-server and sets REDIS_ADDR.
func redisAddr() string {
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a
	}
	return "localhost:6379"
}

// Every process that builds this limiter on the same Redis shares one limit of 3 per second per
// key.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr:                  redisAddr(),
		ContextTimeoutEnabled: true, // lets the limiter's 50ms deadline bound every call
	})
	defer client.Close()

	// A manual clock makes this output reproducible; without WithClock the limiter sends the
	// process's coarse clock.
	clk := clock.NewManual(1_760_000_000_000)
	l, err := redisstore.New(client, "api", policy.SlidingCounter{Limit: 3, Window: time.Second},
		redisstore.WithClock(clk))
	if err != nil {
		panic(err)
	}
	defer l.Close()

	ctx := context.Background()
	_ = l.Reset(ctx, "user:42")
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

// With Redis unreachable, Take returns the failure choice's decision together with an error
// wrapping ErrUnavailable; after the first failure the breaker answers without trying Redis.
func ExampleWithFallback() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // nothing listens there
	defer client.Close()

	// Each process enforces its share of the limit while Redis is away.
	local, err := engine.New(policy.SlidingCounter{Limit: 1, Window: time.Second})
	if err != nil {
		panic(err)
	}
	defer local.Close()

	l, err := redisstore.New(client, "api", policy.SlidingCounter{Limit: 3, Window: time.Second},
		redisstore.WithFallback(local), redisstore.WithBreaker(1, time.Minute))
	if err != nil {
		panic(err)
	}
	defer l.Close()

	for range 2 {
		d, err := l.Take(context.Background(), "user:42", 1)
		fmt.Println(d.Allowed, d.Limit, errors.Is(err, redisstore.ErrUnavailable), errors.Is(err, redisstore.ErrCircuitOpen))
	}
	// Output:
	// true 1 true false
	// false 1 true true
}
