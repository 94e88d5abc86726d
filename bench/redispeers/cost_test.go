package redispeers

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/slidelimit/slidelimit/policy"
)

var evalshaStats = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)`)

// TestServerCost reports the server-side cost of one decision script per library (INFO
// commandstats, usec_per_call of EVALSHA): what bounds a fleet's decisions per second on one
// Redis. The libraries take turns, 10 rounds of 5,000 admitted decisions over 10,000 keys each,
// and each reports its least round, since load from elsewhere on a shared machine only adds. It
// asserts nothing about speed.
func TestServerCost(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	defer c.Close()
	const big = 1<<31 - 1 // far above the load, and an int on 32-bit builds too
	libs := []struct {
		name string
		d    decider
		best float64
	}{
		{name: "slidelimit sliding counter", d: newSlide(policy.SlidingCounter{Limit: big, Window: time.Minute})},
		{name: "slidelimit fixed window", d: newSlide(policy.FixedWindow{Limit: big, Window: time.Minute})},
		{name: "slidelimit token bucket", d: newSlide(policy.TokenBucket{Rate: big, Burst: big})},
		{name: "slidelimit GCRA", d: newSlide(policy.GCRA{Rate: big, Burst: big})},
		{name: "redis_rate GCRA", d: newRRate(redis_rate.Limit{Rate: big, Burst: big, Period: time.Second})},
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		for i := range libs {
			l := &libs[i]
			_ = c.ConfigResetStat(ctx).Err()
			for k := range 5000 {
				if _, err := l.d.decide(ctx, 0, round*5000+k); err != nil {
					t.Fatal(err)
				}
			}
			info, _ := c.Info(ctx, "commandstats").Result()
			m := evalshaStats.FindStringSubmatch(info)
			if m == nil {
				t.Fatalf("%s: no evalsha stats in %q", l.name, info)
			}
			var f float64
			_, _ = fmt.Sscan(m[3], &f)
			if round == 0 || f < l.best {
				l.best = f
			}
		}
	}
	for _, l := range libs {
		t.Logf("%-28s %5.2f µs of server time per decision", l.name, l.best)
		l.d.close()
	}
}
