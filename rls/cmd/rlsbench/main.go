// Command rlsbench measures the rate limit service as Envoy uses it: concurrent gRPC callers on
// loopback, each sending ShouldRateLimit calls back to back, against a server in the same
// process. It prints calls per second and the latency percentiles of one run.
//
//	go run ./cmd/rlsbench -callers 32 -duration 10s                      # in-process engine
//	go run ./cmd/rlsbench -callers 32 -duration 10s -redis redis://127.0.0.1:6379/0
//	go run ./cmd/rlsbench -callers 1 -duration 5s                        # sequential latency
//	go run ./cmd/rlsbench -target 127.0.0.1:8081                         # another service
//
// The workload: -keys client addresses, picked at random per call, each allowed -limit calls per
// minute on one descriptor (remote_address), and with -descriptors 2 also one shared
// per-path limit, so that each call is decided on two limits all or nothing. With -target, the
// calls go to a service that is already running (slidelimit rls, or envoyproxy/ratelimit) with
// domain bench configured as below.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/rls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	callers := flag.Int("callers", 32, "concurrent callers, each on its own gRPC connection")
	duration := flag.Duration("duration", 10*time.Second, "how long to measure, after a one-second warm-up")
	keys := flag.Int("keys", 10000, "distinct client addresses")
	limit := flag.Int("limit", 1000, "calls per client address per minute")
	descriptors := flag.Int("descriptors", 1, "descriptors per call: 1 (per address) or 2 (and a per-path limit)")
	redisURL := flag.String("redis", "", "decide on Redis at this URL instead of in process")
	target := flag.String("target", "", "measure the service at this gRPC address instead of one started here")
	flag.Parse()
	if err := run(*callers, *duration, *keys, *limit, *descriptors, *redisURL, *target); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

// Config is the service config the workload expects, in domain bench.
func config(limit int) string {
	return `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: ` + strconv.Itoa(limit) + `}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 4000000000}
`
}

func run(callers int, duration time.Duration, keys, limit, descriptors int, redisURL, target string) error {
	if callers < 1 || keys < 1 || limit < 1 || descriptors < 1 || descriptors > 2 {
		return fmt.Errorf("-callers, -keys and -limit must be at least 1; -descriptors 1 or 2")
	}
	addr, backend := target, "the service at "+target
	if target == "" {
		var stop func()
		var err error
		if addr, backend, stop, err = start(callers, limit, redisURL); err != nil {
			return err
		}
		defer stop()
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		overLimit int
	)
	start := time.Now()
	measureFrom, until := start.Add(time.Second), start.Add(time.Second+duration)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		client := rlsv3.NewRateLimitServiceClient(conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			mine := make([]time.Duration, 0, 1<<16)
			over := 0
			for {
				req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(rng.IntN(keys))}},
				}}}
				if descriptors == 2 {
					req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
						Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/api"}},
					})
				}
				t := time.Now()
				if t.After(until) {
					break
				}
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := client.ShouldRateLimit(cctx, req)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if t.After(measureFrom) {
					mine = append(mine, time.Since(t))
					if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
						over++
					}
				}
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			overLimit += over
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	slices.Sort(latencies)
	n := len(latencies)
	if n == 0 {
		return fmt.Errorf("no calls completed")
	}
	pct := func(p float64) time.Duration { return latencies[min(n-1, int(p*float64(n)))] }
	fmt.Printf("backend: %s; callers %d; descriptors %d; keys %d; %v measured\n", backend, callers, descriptors, keys, duration)
	fmt.Printf("calls/s %.0f  p50 %v  p99 %v  p99.9 %v  max %v  over limit %.1f%%\n",
		float64(n)/duration.Seconds(), pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond),
		pct(0.999).Round(time.Microsecond), latencies[n-1].Round(time.Microsecond), 100*float64(overLimit)/float64(n))
	return nil
}

// start runs a slidelimit rls server on loopback for the workload.
func start(callers, limit int, redisURL string) (addr, backend string, stop func(), err error) {
	cfg, err := rls.ParseConfig("bench.yaml", []byte(config(limit)))
	if err != nil {
		return "", "", nil, err
	}
	var opts []rls.Option
	backend = "slidelimit rls, in-process engine"
	var client *redis.Client
	if redisURL != "" {
		ro, err := redis.ParseURL(redisURL)
		if err != nil {
			return "", "", nil, err
		}
		ro.ContextTimeoutEnabled = true
		ro.PoolSize = 4 * callers
		client = redis.NewClient(ro)
		opts = append(opts, rls.WithBackend(rls.RedisBackend(client)))
		backend = "slidelimit rls, Redis " + redisURL
	}
	srv, err := rls.NewServer(cfg, opts...)
	if err != nil {
		return "", "", nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return "", "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, rls.Keepalive{}, time.Second) }()
	return lis.Addr().String(), backend, func() {
		cancel()
		<-served
		srv.Close()
		if client != nil {
			client.Close()
		}
	}, nil
}
