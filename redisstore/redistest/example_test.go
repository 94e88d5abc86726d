package redistest_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

// A test starts its own server on a free loopback port, uses it, and stops it (Pause, Kill and
// Restart show what an outage does).
func Example() {
	srv, err := redistest.Start()
	if err != nil { // ErrNotInstalled where the server program is not on PATH
		panic(err)
	}
	defer srv.Stop()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	fmt.Println(c.Ping(context.Background()).Val())
	// Output: PONG
}
