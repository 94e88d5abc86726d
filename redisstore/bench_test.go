package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/policy"
)

// BenchmarkTakeTime compares the two time sources on a real server, one caller, admitted
// requests over 1,000 keys: server time (the default: TIME inside the script) against client
// time (WithClientTime). Run with -benchtime=3000x -count=6; the difference is the cost of the
// TIME call on the server.
func BenchmarkTakeTime(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"server", nil},
		{"client", []Option{WithClientTime()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := newClient(b, testAddr)
			l, err := New(c, "bench", policy.SlidingCounter{Limit: 1 << 30, Window: time.Minute},
				append([]Option{WithTimeout(time.Second)}, tc.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "k" + strconv.Itoa(i)
			}
			ctx := context.Background()
			// Load the script first, then count only the timed calls on the server.
			if _, err := l.Take(ctx, "warm", 1); err != nil {
				b.Fatal(err)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if d, err := l.Take(ctx, keys[i%len(keys)], 1); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(serverMicros(b, c), "server-µs/op")
		})
	}
}

// BenchmarkAll compares one round trip for two limits (All) with two Takes.
func BenchmarkAll(b *testing.B) {
	c := newClient(b, testAddr)
	a, err := New(c, "a", policy.SlidingCounter{Limit: 1 << 30, Window: time.Minute}, WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	h, err := New(c, "h", policy.TokenBucket{Rate: 1 << 30, Burst: 1 << 30}, WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	m, err := All(a, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("all", func(b *testing.B) {
		for i := range b.N {
			if d, err := m.Take(ctx, "k"+strconv.Itoa(i%1000), 1); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("two-takes", func(b *testing.B) {
		for i := range b.N {
			k := "k" + strconv.Itoa(i%1000)
			if d, err := a.Take(ctx, k, 1); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			if d, err := h.Take(ctx, k, 1); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}

// serverMicros reads the server's own time per EVALSHA (INFO commandstats), which the loaded
// client machine's scheduling does not blur.
func serverMicros(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return x
				}
			}
		}
	}
	b.Fatalf("no cmdstat_evalsha in %q", info)
	return 0
}

// BenchmarkLogCost measures what one admitted request of cost n costs the server on a sliding log,
// which writes one entry per unit: a new key each op, the log's largest limit, and for
// limiters=16, All over 16 such logs. The server runs one script at a time, so its time here is
// time every other client waits (see the package doc's Failures).
//
//	go test -run '^$' -bench LogCost -benchtime 20x -count 3 ./redisstore
func BenchmarkLogCost(b *testing.B) {
	c := newClient(b, testAddr)
	ctx := context.Background()
	for _, tc := range []struct{ limiters, cost int }{{1, 1}, {1, 100}, {1, policy.MaxLogLimit}, {16, policy.MaxLogLimit}} {
		b.Run("limiters="+strconv.Itoa(tc.limiters)+"/cost="+strconv.Itoa(tc.cost), func(b *testing.B) {
			ls := make([]*Limiter, tc.limiters)
			for i := range ls {
				l, err := New(c, "logcost"+strconv.Itoa(i), policy.SlidingLog{Limit: policy.MaxLogLimit, Window: time.Minute}, WithTimeout(time.Minute))
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				ls[i] = l
			}
			m, err := All(ls...)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.Take(ctx, "warm", 1); err != nil {
				b.Fatal(err)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			b.ResetTimer()
			for i := range b.N {
				if d, err := m.Take(ctx, prefix+strconv.Itoa(i), int64(tc.cost)); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(serverMicros(b, c), "server-µs/op")
		})
	}
}
