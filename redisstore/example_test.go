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

	// A manual clock makes this output reproducible; without WithClock the limiter decides at the
	// Redis server's time (TIME, read in the script).
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

// NewClient turns a URL into a client the limiter can use; errors never show the password.
func ExampleNewClient() {
	client, err := redisstore.NewClient("redis://" + redisAddr() + "/0")
	if err != nil {
		panic(err)
	}
	defer client.Close()
	fmt.Printf("%T\n", client)

	_, err = redisstore.NewClient("redis://app:s3cret@cache:port/0")
	fmt.Println(err)
	fmt.Println(redisstore.RedactURL("redis://app:s3cret@cache:6379/0"))
	// Output:
	// *redis.Client
	// redisstore: Redis URL "redis://app:xxxxx@cache:port/0" is malformed: invalid port ":port" after host
	// redis://app:xxxxx@cache:6379/0
}

// All decides several limits in one round trip: a request refused by one is counted by none.
func ExampleAll() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	defer client.Close()
	clk := clock.NewManual(1_760_000_000_000)
	perSecond, err := redisstore.New(client, "api-s", policy.SlidingCounter{Limit: 2, Window: time.Second}, redisstore.WithClock(clk))
	if err != nil {
		panic(err)
	}
	defer perSecond.Close()
	perHour, err := redisstore.New(client, "api-h", policy.FixedWindow{Limit: 100, Window: time.Hour}, redisstore.WithClock(clk))
	if err != nil {
		panic(err)
	}
	defer perHour.Close()
	both, err := redisstore.All(perSecond, perHour)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	_ = perSecond.Reset(ctx, "user:7")
	_ = perHour.Reset(ctx, "user:7")
	for range 3 {
		d, err := both.Take(ctx, "user:7", 1)
		fmt.Println(d.Allowed, d.Limit, d.Remaining, err)
	}
	// The refused third request was not counted by the hourly limit either.
	d, _ := perHour.Take(ctx, "user:7", 0)
	fmt.Println("hourly remaining:", d.Remaining)
	// Output:
	// true 2 1 <nil>
	// true 2 0 <nil>
	// false 2 0 <nil>
	// hourly remaining: 98
}

// TakeWithLimit takes the limit on each call; Refund gives back a request that failed upstream.
func ExampleLimiter_TakeWithLimit() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := redisstore.New(client, "tenants", policy.FixedWindow{Limit: 10, Window: time.Minute},
		redisstore.WithClock(clock.NewManual(1_760_000_000_000)))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	_ = l.Reset(ctx, "free-tier")
	d, _ := l.TakeWithLimit(ctx, "free-tier", 3, 3)
	fmt.Println(d.Allowed, d.Limit, d.Remaining)
	given, _ := l.Refund(ctx, "free-tier", 2, d)
	d, _ = l.TakeWithLimit(ctx, "free-tier", 0, 3)
	fmt.Println(given, d.Remaining)
	// Output:
	// true 3 0
	// 2 2
}
