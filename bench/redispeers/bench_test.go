package redispeers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
)

var addr string

func TestMain(m *testing.M) {
	srv, err := redistest.Start()
	if err != nil {
		// Only a missing server program skips, and not under CI=true: a server that fails to
		// start is a failure.
		if errors.Is(err, redistest.ErrNotInstalled) && os.Getenv("CI") != "true" {
			fmt.Printf("redispeers: SKIP: %s is not installed; CI=true makes this a failure\n", redistest.Program())
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "redispeers:", err)
		os.Exit(1)
	}
	addr = srv.Addr
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

const (
	keys     = 10_000
	poolSize = 64
)

// decider is one library's decision for one key; ok reports whether it was admitted.
type decider interface {
	decide(ctx context.Context, g, i int) (ok bool, err error)
	close()
}

func newClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, ContextTimeoutEnabled: true, DisableIdentity: true})
}

func keyName(g, i int) string { return "user:" + strconv.Itoa((g*7919+i)%keys) }

// slidelimit's Limiter: one EVALSHA per decision (or none, for a key in the deny cache).
type slide struct {
	c *redis.Client
	l *redisstore.Limiter
}

func newSlide(p policy.Policy, opts ...redisstore.Option) decider {
	c := newClient()
	l, err := redisstore.New(c, "bench", p, append([]redisstore.Option{redisstore.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		panic(err)
	}
	return &slide{c, l}
}

func (s *slide) decide(ctx context.Context, g, i int) (bool, error) {
	d, err := s.l.Take(ctx, keyName(g, i), 1)
	return d.Allowed, err
}
func (s *slide) close() { _ = s.l.Close(); _ = s.c.Close() }

// go-redis/redis_rate: GCRA, one EVALSHA per decision, server time.
type rrate struct {
	c *redis.Client
	l *redis_rate.Limiter
	n redis_rate.Limit
}

func newRRate(n redis_rate.Limit) decider {
	c := newClient()
	return &rrate{c, redis_rate.NewLimiter(c), n}
}

func (r *rrate) decide(ctx context.Context, g, i int) (bool, error) {
	res, err := r.l.Allow(ctx, keyName(g, i), r.n)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}
func (r *rrate) close() { _ = r.c.Close() }

// go-chi/httprate with httprate-redis's counter, driven through its Handler as a server would:
// an MGET of two window counters, the decision in Go, then a MULTI/INCRBY/EXPIRE/EXEC, under the
// handler's own mutex.
type hrate struct {
	h    http.Handler
	reqs [][]*http.Request
	rc   interface{ IsFallbackActivated() bool }
}

type nopWriter struct {
	h    http.Header
	code int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(code int)        { w.code = code }

func newHRate(limit int, window time.Duration, workers int) decider {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	cfg := &httprateredis.Config{Host: host, Port: uint16(p), PrefixKey: fmt.Sprint("hr", time.Now().UnixNano()),
		WindowLength: window, MaxIdle: poolSize, MaxActive: poolSize, FallbackTimeout: time.Second}
	rc, err := httprateredis.NewRedisLimitCounter(cfg)
	if err != nil {
		panic(err)
	}
	rl := httprate.NewRateLimiter(limit, window, httprate.WithLimitCounter(rc),
		httprate.WithKeyFuncs(func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }))
	h := &hrate{rc: rc}
	h.h = rl.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	// Requests are built once, so the measurement is the limiter's, not net/http's.
	h.reqs = make([][]*http.Request, workers)
	for g := range h.reqs {
		for i := range 256 {
			r, _ := http.NewRequest("GET", "/", nil)
			r.Header.Set("X-Key", keyName(g, i))
			h.reqs[g] = append(h.reqs[g], r)
		}
	}
	return h
}

func (h *hrate) decide(_ context.Context, g, i int) (bool, error) {
	w := &nopWriter{h: http.Header{}}
	h.h.ServeHTTP(w, h.reqs[g%len(h.reqs)][i%256])
	if w.code != 200 && w.code != http.StatusTooManyRequests {
		return false, fmt.Errorf("httprate: status %d", w.code)
	}
	return w.code == 200, nil
}

func (h *hrate) close() {
	if h.rc.IsFallbackActivated() {
		panic("httprate-redis switched to its in-memory fallback: the figures would not be Redis's")
	}
}

// flush empties the server between benchmarks, so that no library reads another run's state.
func flush(b *testing.B) {
	c := newClient()
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

func run(b *testing.B, d decider, callers int, wantAllowed bool) {
	defer d.close()
	ctx := context.Background()
	var bad atomic.Int64
	var next atomic.Int32
	var firstBad atomic.Value
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		for i := range b.N {
			if ok, err := d.decide(ctx, 0, i); err != nil || ok != wantAllowed {
				bad.Add(1)
			}
		}
	} else {
		b.SetParallelism(max(callers/max(1, runtimeProcs()), 1))
		b.RunParallel(func(pb *testing.PB) {
			g := int(next.Add(1)) - 1
			for i := 0; pb.Next(); i++ {
				if ok, err := d.decide(ctx, g, i); err != nil || ok != wantAllowed {
					if bad.Add(1) == 1 {
						firstBad.Store(fmt.Sprintf("caller %d, call %d: allowed %v, err %v", g, i, ok, err))
					}
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d of %d decisions were errors or not the expected outcome; first: %v", n, b.N, firstBad.Load())
	}
}

// BenchmarkAdmit: every request is admitted and counted (limits far above the load), over 10,000
// keys: the write path of each library, one round trip each (two for httprate-redis).
func BenchmarkAdmit(b *testing.B) {
	const big = 1<<31 - 1 // far above the load, and an int on 32-bit builds too
	libs := []struct {
		name string
		mk   func(workers int) decider
	}{
		{"slidelimit-sliding", func(int) decider { return newSlide(policy.SlidingCounter{Limit: big, Window: time.Minute}) }},
		{"slidelimit-gcra", func(int) decider { return newSlide(policy.GCRA{Rate: big, Burst: big}) }},
		{"redis_rate-gcra", func(int) decider { return newRRate(redis_rate.Limit{Rate: big, Burst: big, Period: time.Second}) }},
		{"httprate-redis-sliding", func(w int) decider { return newHRate(big, time.Minute, w) }},
	}
	for _, callers := range []int{1, 64} {
		for _, lib := range libs {
			b.Run(fmt.Sprintf("callers=%d/lib=%s", callers, lib.name), func(b *testing.B) {
				flush(b)
				run(b, lib.mk(callers), callers, true)
			})
		}
	}
}

// BenchmarkBlocked: every request is refused (limit 1 per hour, spent before the timer starts),
// as for a client that keeps hammering after being limited. slidelimit's deny cache answers
// these without a round trip; the row without it shows what the cache saves.
func BenchmarkBlocked(b *testing.B) {
	libs := []struct {
		name string
		mk   func(workers int) decider
	}{
		{"slidelimit-sliding", func(int) decider { return newSlide(policy.SlidingCounter{Limit: 1, Window: time.Hour}) }},
		{"slidelimit-sliding-nocache", func(int) decider {
			return newSlide(policy.SlidingCounter{Limit: 1, Window: time.Hour}, redisstore.WithDenyCache(0))
		}},
		{"redis_rate-gcra", func(int) decider { return newRRate(redis_rate.PerHour(1)) }},
		{"httprate-redis-sliding", func(w int) decider { return newHRate(1, time.Hour, w) }},
	}
	for _, callers := range []int{1, 64} {
		for _, lib := range libs {
			b.Run(fmt.Sprintf("callers=%d/lib=%s", callers, lib.name), func(b *testing.B) {
				flush(b)
				d := lib.mk(callers)
				// Spend every key's single permit first.
				for g := range max(callers, 1) {
					for i := range 256 {
						_, _ = d.decide(context.Background(), g, i)
					}
				}
				run(b, &cycled{d}, callers, false)
			})
		}
	}
}

// cycled keeps a blocked run on the 256 keys per caller that were spent beforehand.
type cycled struct{ decider }

func (c *cycled) decide(ctx context.Context, g, i int) (bool, error) {
	return c.decider.decide(ctx, g, i%256)
}
