package rls_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/redistest"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
)

// startRedis runs a throwaway redis-server (redistest) on a free loopback port. It skips when the
// server program is not installed, except under CI=true, where that fails.
func startRedis(t *testing.T) string {
	t.Helper()
	srv, err := redistest.Start()
	if errors.Is(err, redistest.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip("redis-server is not installed")
	}
	require.NoError(t, err, "CI must run the Redis tests")
	t.Cleanup(srv.Stop)
	return srv.Addr
}

// patient lets a Redis call take as long as a loaded machine needs: the default 50ms deadline
// would turn a slow answer into a failure that the failure mode decides, which is not what these
// tests are about.
var patient = redisstore.WithTimeout(5 * time.Second)

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// Two replicas on one Redis share each limit.
func TestRedisReplicasShareLimits(t *testing.T) {
	addr := startRedis(t)
	// A day's window: a run that straddles its edge (a few ms in 86.4M) would see the carried
	// weight of the previous one.
	cfg := parse(t, "domain: basic\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	a := serve(t, cfg, rls.WithBackend(rls.RedisBackend(redisClient(t, addr), patient)))
	b := serve(t, cfg, rls.WithBackend(rls.RedisBackend(redisClient(t, addr), patient)))
	// 5 a day between them.
	for i := range 5 {
		s := a
		if i%2 == 1 {
			s = b
		}
		r := s.call(t, "basic", 0, desc("user", "vip"))
		require.Equal(t, []string{ok, ok}, outcome(r), "hit %d", i+1)
		require.Equal(t, uint32(4-i), r.GetStatuses()[0].GetLimitRemaining())
	}
	r := b.call(t, "basic", 0, desc("user", "vip"))
	require.Equal(t, []string{over, over}, outcome(r))
	ttr := r.GetStatuses()[0].GetDurationUntilReset().AsDuration()
	require.True(t, ttr > 0 && ttr <= 24*time.Hour+time.Millisecond, "duration_until_reset %v", ttr)
	require.Equal(t, []string{over, over}, outcome(a.call(t, "basic", 0, desc("user", "vip"))))
}

// On Redis a refused request is charged nothing, whatever the order of the descriptors: what the
// others took is given back.
func TestRedisRefusalChargesNothing(t *testing.T) {
	addr := startRedis(t)
	// The store's clock, manual, makes the windows and the durations exact.
	clk := clock.NewManual(t0)
	defer clk.Stop()
	s := serve(t, loadGood(t), rls.WithBackend(rls.RedisBackend(redisClient(t, addr), redisstore.WithClock(clk), patient)))
	for range 2 {
		require.Equal(t, []string{ok, ok}, outcome(s.call(t, "basic", 0, desc("b", "1"))))
	}
	for range 3 {
		r := s.call(t, "basic", 0, desc("b", "1"), desc("a", "1"))
		require.Equal(t, []string{over, over, ok}, outcome(r))
		require.Equal(t, uint32(5), r.GetStatuses()[1].GetLimitRemaining(), "a was only queried")
		require.Equal(t, 1001*time.Millisecond, r.GetStatuses()[0].GetDurationUntilReset().AsDuration())
		r = s.call(t, "basic", 0, desc("a", "1"), desc("b", "1"))
		require.Equal(t, []string{over, ok, over}, outcome(r))
		require.Equal(t, uint32(5), r.GetStatuses()[0].GetLimitRemaining(), "a was only queried")
	}
	r := s.call(t, "basic", 0, desc("a", "1"))
	require.Equal(t, uint32(4), r.GetStatuses()[0].GetLimitRemaining())
	// An admitted request counts on both.
	r = s.call(t, "basic", 0, desc("a", "2"), desc("b", "2"))
	require.Equal(t, []string{ok, ok, ok}, outcome(r))
	require.Equal(t, []uint32{4, 1}, []uint32{r.GetStatuses()[0].GetLimitRemaining(), r.GetStatuses()[1].GetLimitRemaining()})
}

// Redis runs every policy the service accepts: a leaky bucket loads and decides there, and a
// second replica on the same Redis sees the first one's count.
func TestRedisRunsTheBucketPolicies(t *testing.T) {
	addr := startRedis(t)
	cfg := parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, policy: leaky-bucket}\n")
	a, err := rls.NewServer(cfg, rls.WithBackend(rls.RedisBackend(redisClient(t, addr), patient)))
	require.NoError(t, err)
	defer a.Close()
	b, err := rls.NewServer(cfg, rls.WithBackend(rls.RedisBackend(redisClient(t, addr), patient)))
	require.NoError(t, err)
	defer b.Close()
	ctx := context.Background()
	codes := func(s *rls.Server) rlsv3.RateLimitResponse_Code {
		r, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "x")}})
		require.NoError(t, err)
		return r.GetOverallCode()
	}
	require.Equal(t, rlsv3.RateLimitResponse_OK, codes(a))
	require.Equal(t, rlsv3.RateLimitResponse_OK, codes(b))
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, codes(a), "the bucket holds 2, shared by both replicas")
}

// When Redis cannot decide, the backend's failure mode does: open admits, closed refuses. Every
// error is counted; the log gets at most a line a second.
func TestRedisDownDecidesByFailureMode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nothing := ln.Addr().String()
	ln.Close() // nothing listens there now: every call fails at once
	for _, c := range []struct {
		mode slidelimit.FailureMode
		want string
	}{{slidelimit.FailOpen, ok}, {slidelimit.FailClosed, over}} {
		s := serve(t, loadGood(t), rls.WithBackend(rls.RedisBackend(redisClient(t, nothing), redisstore.WithOnFailure(c.mode))))
		start := time.Now()
		for range 20 {
			require.Equal(t, []string{c.want, c.want}, outcome(s.call(t, "basic", 0, desc("a", "1"))), c.mode.String())
		}
		// At most a line a second: two for a loop within a second, one more for each second a
		// loaded machine made it take.
		most := 2 + int(time.Since(start)/time.Second)
		require.Contains(t, scrape(t, s.srv), "slidelimit_rls_backend_errors_total 20")
		lines := strings.Count(s.log.String(), "by the backend's failure mode")
		require.True(t, lines >= 1 && lines <= most, "%d log lines for 20 errors, at most %d:\n%s", lines, most, s.log.String())
		require.Contains(t, s.log.String(), "domain basic descriptor a: redisstore:")
	}
}

// A request with thousands of descriptors is decided on a bounded number of goroutines: one for
// each queued them all on the client's pool at once, where those waiting past the store's
// timeout failed, and were decided by the failure mode, admitted uncounted. The client counts the
// calls in flight at once, which that queueing took to 20,001: the bound is checked by count, not
// by a deadline that a loaded machine could miss for other reasons.
func TestRedisManyDescriptorsDecidedWithinTheTimeout(t *testing.T) {
	addr := startRedis(t)
	cfg := parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n  - key: j\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	c := redisClient(t, addr)
	var calls callsInFlight
	c.AddHook(&calls)
	s := serve(t, cfg, rls.WithBackend(rls.RedisBackend(c, patient)))
	var ds []*ratelimitv3.RateLimitDescriptor
	for i := range 20_000 {
		ds = append(ds, desc("k", strconv.Itoa(i)))
	}
	ds = append(ds, desc("j", "x"))
	r := s.call(t, "d", 0, ds...)
	require.Equal(t, ok, outcome(r)[0])
	for i, st := range r.GetStatuses() {
		require.Equal(t, uint32(4), st.GetLimitRemaining(), "descriptor %d", i)
	}
	requireSeries(t, scrape(t, s.srv), "slidelimit_rls_backend_errors_total 0")
	require.LessOrEqual(t, calls.most.Load(), int64(1000), "calls to Redis in flight at once for one request")
}

// callsInFlight is a go-redis hook that keeps the most calls it has seen in flight at once.
type callsInFlight struct{ now, most atomic.Int64 }

func (h *callsInFlight) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *callsInFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		n := h.now.Add(1)
		defer h.now.Add(-1)
		for m := h.most.Load(); n > m; m = h.most.Load() {
			if h.most.CompareAndSwap(m, n) {
				break
			}
		}
		return next(ctx, cmd)
	}
}

func (h *callsInFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCostAboveLimitReportsWhatIsLeft: a hit above what the policy can ever admit at once is
// refused, and its status says what the key still has, for every policy and on both backends:
// GCRA refuses it before reading the key, and the server then reads the key without taking.
func TestCostAboveLimitReportsWhatIsLeft(t *testing.T) {
	addr := startRedis(t)
	clk := clock.NewManual(t0)
	defer clk.Stop()
	backends := map[string]rls.Option{
		"engine": nil,
		"redis":  rls.WithBackend(rls.RedisBackend(redisClient(t, addr), redisstore.WithClock(clk), patient)),
	}
	for name, backend := range backends {
		for _, pol := range []string{"sliding-counter", "fixed-window", "token-bucket", "gcra", "leaky-bucket"} {
			t.Run(name+"/"+pol, func(t *testing.T) {
				// The clocks are manual and stand still: a second's limit holds throughout.
				cfg := parse(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, policy: %s}\n", pol))
				opts := []rls.Option{rls.WithHeaders(true)}
				if backend != nil {
					opts = append(opts, backend)
				}
				s := serve(t, cfg, opts...)
				value := name + pol // a key of its own on the shared Redis
				require.Equal(t, []string{ok, ok}, outcome(s.call(t, "d", 0, desc("k", value))))
				for _, cost := range []uint64{3, 1 << 40} {
					r := s.call(t, "d", 0, withHits(desc("k", value), cost))
					require.Equal(t, []string{over, over}, outcome(r), "cost %d", cost)
					require.Equal(t, uint32(1), r.GetStatuses()[0].GetLimitRemaining(), "cost %d: one of two left", cost)
					// No t: no wait admits the hit (as httplimit gives such a refusal none).
					require.Equal(t, `"k";r=1`, fieldsOf(r)["RateLimit"], "cost %d", cost)
				}
				r := s.call(t, "d", 0, desc("k", value))
				require.Equal(t, []string{ok, ok}, outcome(r), "the refused hits took nothing")
				require.Equal(t, uint32(0), r.GetStatuses()[0].GetLimitRemaining())
			})
		}
	}
}

// On Redis as in process, a bucket given back the units of a request another descriptor refused
// is full again sooner, and its RateLimit item's t says so: the time moves back by the refill of
// what came back (the Redis backend cannot be read back without a round trip).
func TestRedisGivenBackBucketResetsSooner(t *testing.T) {
	addr := startRedis(t)
	clk := clock.NewManual(t0)
	defer clk.Stop()
	cfg := parse(t, `domain: d
descriptors:
  - key: a
    rate_limit: {name: a, window: 2s, requests_per_unit: 4, policy: token-bucket}
  - key: b
    rate_limit: {name: b, window: 2s, requests_per_unit: 2, policy: token-bucket}
`)
	now := func() time.Time { return time.UnixMilli(clk.Now()) }
	for name, backend := range map[string]rls.Option{
		"engine": rls.WithBackend(rls.EngineBackend(engine.WithClock(clk))),
		"redis":  rls.WithBackend(rls.RedisBackend(redisClient(t, addr), redisstore.WithClock(clk), patient)),
	} {
		s := serve(t, cfg, backend, rls.WithHeaders(true), rls.WithNow(now))
		for range 2 { // a: 4 → 2 (rate 2 a second); b: 2 → 0 (rate 1 a second)
			require.Equal(t, []string{ok, ok, ok}, outcome(s.call(t, "d", 0, desc("a", name), desc("b", name))), name)
		}
		r := s.call(t, "d", 0, desc("a", name), desc("b", name))
		require.Equal(t, []string{over, ok, over}, outcome(r), name)
		// a holds 2 again, 2 short of 4: full in 1 s at 2 a second (its take had said 1.5 s).
		require.Regexp(t, `^"a";r=2;t=1, "b";r=0;t=1$`, fieldsOf(r)["RateLimit"], name)
	}
}
