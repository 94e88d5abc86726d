package rls_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/rls"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// An unlimited limit that replaces another exempts a request matching both from the other, as
// envoyproxy/ratelimit does: the way to give a few values no limit under a default key.
func TestReplacedByUnlimited(t *testing.T) {
	s := serve(t, parse(t, `
domain: d
descriptors:
  - key: base
    rate_limit:
      name: base
      unit: minute
      requests_per_unit: 1
  - key: vip
    rate_limit:
      unlimited: true
      replaces:
        - name: base
`))
	for i := range 3 {
		r := s.call(t, "d", 0, desc("base", "a"), desc("vip", "yes"))
		require.Equal(t, []string{ok, ok, ok}, outcome(r), "call %d", i)
		require.Nil(t, r.GetStatuses()[0].GetCurrentLimit(), "the replaced limit is not applied")
	}
	// Without the replacing descriptor the limit still holds.
	require.Equal(t, []string{ok, ok}, outcome(s.call(t, "d", 0, desc("base", "a"))))
	require.Equal(t, []string{over, over}, outcome(s.call(t, "d", 0, desc("base", "a"))))
}

// A backend that returns no limiter and no error is a bad backend, not a limit of zero.
func TestBackendWithoutLimiter(t *testing.T) {
	cfg := parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n")
	_, err := rls.NewServer(cfg, rls.WithBackend(rls.BackendFunc(func(string, policy.Policy) (slidelimit.Limiter, error) {
		return nil, nil
	})))
	var ce *rls.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), "the backend returned no limiter and no error")
}

func TestServeNilListener(t *testing.T) {
	srv, err := rls.NewServer(loadGood(t))
	require.NoError(t, err)
	defer srv.Close()
	require.EqualError(t, srv.Serve(context.Background(), nil, rls.Keepalive{}, time.Second), "rls: Serve: nil listener")
}

// Health is the Server's, on every gRPC server it is registered on: NOT_SERVING once a Serve has
// shut down, SERVING again when the next Serve begins, and NOT_SERVING for good after Close.
func TestHealthFollowsServe(t *testing.T) {
	srv, err := rls.NewServer(loadGood(t))
	require.NoError(t, err)
	// A gRPC server of the caller's own, that only registers srv: its health is srv's.
	g := grpc.NewServer()
	srv.Register(g)
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go g.Serve(glis)
	defer g.Stop()
	conn, err := grpc.NewClient(glis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), failsafe)
		defer cancel()
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		require.NoError(t, err)
		return res.GetStatus()
	}
	// serveOnce starts a Serve, waits until it answers on its own listener (Serve sets the status
	// before it serves, so the status is then Serve's), checks the status on g, then ends the Serve.
	serveOnce := func(want healthpb.HealthCheckResponse_ServingStatus) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, lis, rls.Keepalive{}, time.Second) }()
		own, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		rctx, rcancel := context.WithTimeout(context.Background(), failsafe)
		_, err = healthpb.NewHealthClient(own).Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		rcancel()
		own.Close()
		require.NoError(t, err, "Serve never answered")
		require.Equal(t, want, check())
		cancel()
		require.NoError(t, <-done)
	}
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, check())
	serveOnce(healthpb.HealthCheckResponse_SERVING)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, check(), "after Serve shut down")
	serveOnce(healthpb.HealthCheckResponse_SERVING) // a second Serve serves again
	// A Serve whose listener fails returns its error and leaves health NOT_SERVING.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, lis.Close())
	require.Error(t, srv.Serve(context.Background(), lis, rls.Keepalive{}, time.Second))
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, check(), "after Serve's listener failed")
	serveOnce(healthpb.HealthCheckResponse_SERVING)
	require.NoError(t, srv.Close())
	serveOnce(healthpb.HealthCheckResponse_NOT_SERVING)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, check(), "after Close")
}

// The reload counters exist at 0 before the first reload, so that a dashboard's rate over them
// has a first point.
func TestReloadCountersStartAtZero(t *testing.T) {
	s := serve(t, loadGood(t))
	m := scrape(t, s.srv)
	require.Contains(t, m, `slidelimit_rls_config_reloads_total{result="ok"} 0`)
	require.Contains(t, m, `slidelimit_rls_config_reloads_total{result="error"} 0`)
}

// A health Watch stream, which lasts until its client ends it, does not hold Serve's graceful
// shutdown for its grace: it is sent NOT_SERVING and ended. Serve waited out the whole grace (here
// an hour) for each client health-checking by watching.
func TestServeEndsHealthWatches(t *testing.T) {
	addr, cancel, done := serveGood(t, time.Hour)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), failsafe)
	defer wcancel()
	for _, service := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		w, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
		require.NoError(t, err)
		first, err := w.Recv()
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())
		defer func() {
			// Read after the shutdown began: NOT_SERVING, once, then the stream's end.
			var after []healthpb.HealthCheckResponse_ServingStatus
			for {
				r, err := w.Recv()
				if err != nil {
					require.ErrorIs(t, err, io.EOF, "%q: the stream ends cleanly", service)
					break
				}
				after = append(after, r.GetStatus())
			}
			require.Equal(t, []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING}, after, "%q", service)
		}()
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(failsafe):
		t.Fatal("Serve waited for the Watch streams")
	}
}

// serveGood runs Serve, with grace and opts, for a Server of loadGood's config on a free loopback
// port until cancel is called, and returns the port's address and the channel Serve's result
// comes on. The Server is closed when the test ends.
func serveGood(t *testing.T, grace time.Duration, opts ...grpc.ServerOption) (addr string, cancel func(), done <-chan error) {
	t.Helper()
	srv, err := rls.NewServer(loadGood(t))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, rls.Keepalive{}, grace, opts...) }()
	return lis.Addr().String(), cancel, served
}
