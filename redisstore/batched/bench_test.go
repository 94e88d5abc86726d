package batched

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
)

// hotPolicy is the engine's one-word cell (limit 2^21-1); the clock moves one window on every 2^19
// decisions, so no run reaches the limit and every decision is an admission that writes its cell.
var hotPolicy = policy.SlidingCounter{Limit: 1<<21 - 1, Window: time.Second}

// BenchmarkAllow compares a decision on a key with local quota with the engine's Allow on a
// tracked key, in one run: compare with `go tool benchstat -col /impl`. The batched limiter runs
// its exchange goroutine, so renewals happen as in production; a renewal or a new window's lease
// costs a round trip on the request's path about once per 2^19 decisions.
func BenchmarkAllow(b *testing.B) {
	for _, impl := range []string{"engine", "batched"} {
		b.Run("impl="+impl, func(b *testing.B) {
			allow := hotAllow(b, impl)
			b.ReportAllocs()
			clk := hotClock
			i := 0
			for b.Loop() {
				if i++; i&(1<<19-1) == 0 {
					clk.Advance(time.Second)
				}
				if !allow("hot") {
					b.Fatalf("refused after %d decisions", i)
				}
			}
		})
	}
}

// BenchmarkAllowParallel is BenchmarkAllow from GOMAXPROCS goroutines on the one key.
func BenchmarkAllowParallel(b *testing.B) {
	for _, impl := range []string{"engine", "batched"} {
		b.Run("impl="+impl, func(b *testing.B) {
			allow := hotAllow(b, impl)
			b.ReportAllocs()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if n.Add(1)&(1<<19-1) == 0 {
						hotClock.Advance(time.Second)
					}
					allow("hot")
				}
			})
		})
	}
}

var hotClock *clock.Clock

func hotAllow(b *testing.B, impl string) func(string) bool {
	hotClock = clock.NewManual(1_764_000_000_000)
	switch impl {
	case "engine":
		l, err := engine.New(hotPolicy, engine.WithClock(hotClock), engine.WithEviction(false))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		l.Allow("hot")
		return l.Allow
	}
	c := newClient(b, testAddr)
	flushAll(b, c)
	l, err := New(c, "bench", hotPolicy, WithClock(hotClock))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	for range 1000 {
		l.Allow("hot")
	}
	return l.Allow
}

// BenchmarkRefusedParallel decides for one key at its fleet-wide limit from 4×GOMAXPROCS
// goroutines: after the first refusal every decision is a refusal from the one Redis remembered,
// as a fleet at its limit makes most of its decisions, answered without the key's lock.
// ctx=done-able passes a ctx that can be cancelled, which each refusal checks. Compare with the
// engine refusing a key over its limit: `go tool benchstat -col /impl`.
func BenchmarkRefusedParallel(b *testing.B) {
	for _, impl := range []string{"engine", "batched"} {
		for _, cancellable := range []bool{false, true} {
			if impl == "engine" && cancellable {
				continue
			}
			b.Run("impl="+impl+"/ctx="+map[bool]string{false: "background", true: "done-able"}[cancellable], func(b *testing.B) {
				p := policy.SlidingCounter{Limit: 10, Window: time.Minute}
				clk := clock.NewManual(1_764_000_000_000) // still: the refusal is remembered throughout
				var take func(context.Context) bool
				if impl == "engine" {
					l, err := engine.New(p, engine.WithClock(clk))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { l.Close() })
					take = func(context.Context) bool { return l.Allow("k") }
				} else {
					c := newClient(b, testAddr)
					flushAll(b, c)
					l := newLimiter(b, c, clk, p)
					take = func(ctx context.Context) bool { d, _ := l.Take(ctx, "k", 1); return d.Allowed }
				}
				for take(context.Background()) {
				}
				b.ReportAllocs()
				b.SetParallelism(4)
				var admitted atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					if cancellable {
						var cancel context.CancelFunc
						ctx, cancel = context.WithCancel(ctx)
						defer cancel()
					}
					for pb.Next() {
						if take(ctx) {
							admitted.Add(1)
						}
					}
				})
				if admitted.Load() != 0 {
					b.Fatalf("%d admitted past the limit", admitted.Load())
				}
			})
		}
	}
}

// counter is a go-redis hook that counts the commands a client sends, pipelined or not.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

const loadProcs = 3

// loadKeys is made on first use, so that the tests do not pay for it.
var loadKeys = sync.OnceValue(func() []string {
	s := make([]string, 1<<20)
	for i := range s {
		s[i] = "client-" + strconv.Itoa(i)
	}
	return s
})

// BenchmarkRedisLoad counts the Redis commands sent per 1,000 decisions by three processes (three
// limiters with their own clients, in this test process) under per-decision mode (redisstore)
// and batched mode, for one hot key and for keys drawn uniformly from 2^10 and from 2^20. Counted on the
// clients by a hook (every command of a pipeline counts), heartbeats and returns included. Run
// with a fixed count, e.g. -benchtime=200000x: the figure depends on decisions per key per window.
func BenchmarkRedisLoad(b *testing.B) {
	for _, keys := range []int{1, 1 << 10, 1 << 20} {
		for _, mode := range []string{"exact", "batched"} {
			b.Run("keys="+strconv.Itoa(keys)+"/mode="+mode, func(b *testing.B) {
				p := policy.SlidingCounter{Limit: 1 << 30, Window: time.Second}
				if keys > 1 {
					p.Limit = 100
				}
				admin := newClient(b, testAddr)
				flushAll(b, admin)
				names := loadKeys()
				var cnt counter
				takes := make([]func(context.Context, string, int64) (bool, error), loadProcs)
				for i := range takes {
					c := redis.NewClient(&redis.Options{Addr: testAddr, PoolSize: 64, DisableIdentity: true, ContextTimeoutEnabled: true})
					c.AddHook(&cnt)
					b.Cleanup(func() { _ = c.Close() })
					switch mode {
					case "exact":
						l, err := redisstore.New(c, "load", p, redisstore.WithTimeout(time.Second))
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { l.Close() })
						takes[i] = func(ctx context.Context, k string, n int64) (bool, error) {
							d, err := l.Take(ctx, k, n)
							return d.Allowed, err
						}
					default:
						l, err := New(c, "load", p, WithTimeout(time.Second))
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { l.Close() })
						takes[i] = func(ctx context.Context, k string, n int64) (bool, error) {
							d, err := l.Take(ctx, k, n)
							return d.Allowed, err
						}
					}
				}
				cnt.n.Store(0)
				var g atomic.Int64
				var admitted atomic.Int64
				start := time.Now()
				b.SetParallelism(16)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					id := g.Add(1)
					take := takes[id%loadProcs]
					x := uint64(id) * 0x9e3779b97f4a7c15
					ctx := context.Background()
					for pb.Next() {
						x ^= x << 13
						x ^= x >> 7
						x ^= x << 17
						k := "hot"
						if keys > 1 {
							k = names[x%uint64(keys)]
						}
						if ok, err := take(ctx, k, 1); err != nil {
							b.Error(err)
							return
						} else if ok {
							admitted.Add(1)
						}
					}
				})
				b.StopTimer()
				el := time.Since(start)
				b.ReportMetric(float64(cnt.n.Load())*1000/float64(b.N), "cmds/1k-decisions")
				b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
				b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/decision")
			})
		}
	}
}
