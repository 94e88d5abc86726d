package rls_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit/rls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const benchConfig = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 4000000000}
`

func benchRequests(n int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(i)}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/api"}}},
		}}
	}
	return reqs
}

// benchServer serves benchConfig on the engine until the benchmark ends.
func benchServer(b *testing.B) *rls.Server {
	cfg, err := rls.ParseConfig("bench.yaml", []byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := rls.NewServer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	return srv
}

// The decision alone, without gRPC: two descriptors, all or nothing, on the engine.
func BenchmarkShouldRateLimit(b *testing.B) {
	srv := benchServer(b)
	reqs := benchRequests(1024)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1) * 7919
		for pb.Next() {
			i++
			if _, err := srv.ShouldRateLimit(context.Background(), reqs[i%uint64(len(reqs))]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The same over gRPC on loopback, one connection per parallel caller: what Envoy sees.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	srv := benchServer(b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis, rls.Keepalive{}, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	reqs := benchRequests(1024)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		c := rlsv3.NewRateLimitServiceClient(conn)
		i := next.Add(1) * 7919
		for pb.Next() {
			i++
			if _, err := c.ShouldRateLimit(context.Background(), reqs[i%uint64(len(reqs))]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// One request with many descriptors, each its own key, as a message near gRPC's 4 MiB limit can
// carry: finding the twins among them was quadratic (160,000 took 44 s under the read lock a
// reload waits for).
func BenchmarkShouldRateLimitManyDescriptors(b *testing.B) {
	srv := benchServer(b)
	req := &rlsv3.RateLimitRequest{Domain: "bench"}
	for i := range 20_000 {
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: strconv.Itoa(i)}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srv.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
