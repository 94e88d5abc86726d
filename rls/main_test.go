package rls_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/clock"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// failsafe bounds waits so that a hung server fails the test instead of the run; no test asserts
// on it.
const failsafe = 30 * time.Second

// t0 is a Unix millisecond at the start of a second, a minute and an hour, so that the windows
// the tests reason about start there.
const t0 = 1_764_000_000_000

// served is one Server behind a real gRPC listener on loopback, with a real client.
type served struct {
	srv    *rls.Server
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	clk    *clock.Clock
	log    *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve starts a Server for cfg on the in-process engine with a manual clock at t0 (unless opts
// choose another backend) and connects a client to it. Everything stops at the test's end.
func serve(t *testing.T, cfg *rls.Config, opts ...rls.Option) *served {
	t.Helper()
	return serveFrom(t, t0, cfg, opts...)
}

// serveFrom is serve with the manual clock at start (Unix milliseconds): the RateLimit header's
// reset times are counted from the wall clock, so a test of them starts the clock at now.
func serveFrom(t *testing.T, start int64, cfg *rls.Config, opts ...rls.Option) *served {
	t.Helper()
	s := &served{clk: clock.NewManual(start), log: &syncBuffer{}}
	all := append([]rls.Option{rls.WithBackend(rls.EngineBackend(engine.WithClock(s.clk))), rls.WithLogger(log.New(s.log, "", 0))}, opts...)
	srv, err := rls.NewServer(cfg, all...)
	require.NoError(t, err)
	s.srv = srv
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, rls.Keepalive{}, time.Second) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	s.conn = conn
	s.client = rlsv3.NewRateLimitServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(failsafe):
			t.Error("Serve did not return")
		}
		srv.Close()
		s.clk.Stop()
	})
	return s
}

func loadGood(t *testing.T) *rls.Config {
	t.Helper()
	cfg, err := rls.LoadConfig(filepath.Join("testdata", "good", "basic.yaml"))
	require.NoError(t, err)
	return cfg
}

func parse(t *testing.T, yaml string) *rls.Config {
	t.Helper()
	cfg, err := rls.ParseConfig("test.yaml", []byte(yaml))
	require.NoError(t, err)
	return cfg
}

// oneLimit is a config of one rate limit: 100 hits a minute per value of key k, in domain d.
const oneLimit = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"

// serverOn returns a server of yaml whose every rate limit decides with lim, closed at the
// test's end.
func serverOn(t *testing.T, yaml string, lim slidelimit.Limiter, opts ...rls.Option) *rls.Server {
	t.Helper()
	opts = append(opts, rls.WithBackend(rls.BackendFunc(func(string, policy.Policy) (slidelimit.Limiter, error) {
		return lim, nil
	})))
	srv, err := rls.NewServer(parse(t, yaml), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// deadRedisServer returns a server of oneLimit, with headers, on a Redis at a port where nothing
// listens, closed at the test's end.
func deadRedisServer(t *testing.T, opts ...redisstore.Option) *rls.Server {
	t.Helper()
	client, err := redisstore.NewClient("redis://127.0.0.1:1/0")
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	opts = append([]redisstore.Option{redisstore.WithTimeout(20 * time.Millisecond)}, opts...)
	srv, err := rls.NewServer(parse(t, oneLimit), rls.WithHeaders(true), rls.WithBackend(rls.RedisBackend(client, opts...)))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// fieldsOf returns the response headers r asks Envoy to add, by name.
func fieldsOf(r *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, hv := range r.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	return h
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (s *served) call(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	resp, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	require.Len(t, resp.GetStatuses(), len(ds))
	return resp
}

// outcome returns the overall code and each status's code, as strings for readable failures.
func outcome(r *rlsv3.RateLimitResponse) []string {
	out := []string{r.GetOverallCode().String()}
	for _, s := range r.GetStatuses() {
		out = append(out, s.GetCode().String())
	}
	return out
}

func (s *served) advance(d time.Duration) { s.clk.Advance(d) }

// scrape returns the server's metrics page, served by a real HTTP server.
func scrape(t *testing.T, srv *rls.Server) string {
	t.Helper()
	hs := httptest.NewServer(srv.MetricsHandler())
	defer hs.Close()
	res, err := http.Get(hs.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}
