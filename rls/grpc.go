package rls

import (
	"context"
	"errors"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

const healthServing = healthpb.HealthCheckResponse_SERVING

// Keepalive holds the gRPC server's connection settings; a zero field takes the default given.
// It is a plain value, safe to copy and share.
type Keepalive struct {
	// Time is how long a connection may sit idle before the server pings the client (default 1m),
	// so that a half-open connection from a proxy that went away is noticed.
	Time time.Duration
	// Timeout is how long the server waits for the ping's answer before closing (default 20s).
	Timeout time.Duration
	// MinPingInterval is the most often a client may ping (default 10s). gRPC's own default, 5m,
	// makes the server close the connection of an Envoy that pings more often ("too_many_pings").
	MinPingInterval time.Duration
	// MaxConnectionAge closes connections after this long (default 0: never), so that clients
	// spread over new replicas; MaxConnectionAgeGrace lets calls in progress finish (default 10s).
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
}

// ServerOptions returns the grpc.ServerOptions that apply k. A pure function of k.
func (k Keepalive) ServerOptions() []grpc.ServerOption {
	or := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	sp := keepalive.ServerParameters{Time: or(k.Time, time.Minute), Timeout: or(k.Timeout, 20*time.Second)}
	if k.MaxConnectionAge > 0 {
		sp.MaxConnectionAge = k.MaxConnectionAge
		sp.MaxConnectionAgeGrace = or(k.MaxConnectionAgeGrace, 10*time.Second)
	}
	return []grpc.ServerOption{
		grpc.KeepaliveParams(sp),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: or(k.MinPingInterval, 10*time.Second), PermitWithoutStream: true}),
	}
}

// Register adds the rate limit service and the standard gRPC health service (grpc.health.v1,
// SERVING for "" and for envoy.service.ratelimit.v3.RateLimitService until Close) to g. Call it
// before g serves, as gRPC requires; one Server may be registered on several gRPC servers.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Serve serves the rate limit and health services on lis until ctx ends, then shuts down
// gracefully: health turns NOT_SERVING, the listener closes, and calls in progress have up to
// grace (default 10s) to finish before their connections are cut. It returns nil after a
// shutdown that ctx asked for, and the listener's error otherwise. It does not Close s.
func (s *Server) Serve(ctx context.Context, lis net.Listener, k Keepalive, grace time.Duration, opts ...grpc.ServerOption) error {
	if grace <= 0 {
		grace = 10 * time.Second
	}
	g := grpc.NewServer(append(k.ServerOptions(), opts...)...)
	s.Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	select {
	case err := <-served:
		g.Stop()
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		g.Stop()
		<-stopped
	}
	<-served
	return nil
}
