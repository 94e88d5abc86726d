package rls

import (
	"context"
	"errors"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

const healthServing = healthpb.HealthCheckResponse_SERVING

// Keepalive holds the gRPC server's connection settings; a zero field takes the default given.
// It is a plain value, safe to copy and to share between goroutines.
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
	// spread over new replicas.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long calls in progress on a connection closed for its age may
	// take to finish (default 10s).
	MaxConnectionAgeGrace time.Duration
}

// ServerOptions returns the grpc.ServerOptions that apply k. A pure function of k, safe to call
// from any goroutine; the options it returns may be given to any number of servers.
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
// for "" and for envoy.service.ratelimit.v3.RateLimitService) to g. Call it before g serves, as
// gRPC requires; one Server may be registered on several gRPC servers. The health status is the
// Server's, the same on each of them: SERVING from NewServer, NOT_SERVING once a Serve call shuts
// down or its listener fails (until the next Serve begins), and NOT_SERVING for good after Close.
// It writes to g and never to s, so it may run concurrently with s's other methods, and with
// Register calls for other gRPC servers. A health Watch stream on g lasts until its client ends
// it, Close included (it is sent NOT_SERVING): only Serve's own servers end them at shutdown, so
// a caller's GracefulStop of g waits for them, and its Stop does not.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// DefaultMaxStreams is how many calls (HTTP/2 streams) one connection may have in progress at
// once under Serve, unless its options set grpc.MaxConcurrentStreams: a client that sends calls
// and never reads the answers holds at most this many answers in the server's memory.
const DefaultMaxStreams = 100

// DefaultMaxHeaderBytes is the most header bytes (as HTTP/2 counts them: each field's name and
// value and 32 bytes more) one call may send under Serve, unless its options set
// grpc.MaxHeaderListSize; a call whose fields add up to more has its stream reset, and the
// connection's other calls go on, but one field longer than the bound on its own closes the
// connection (HTTP/2's header decoder holds no longer string). gRPC's own default is 16 MiB a call, which with DefaultMaxStreams calls in progress
// lets one connection hold 1.7 GB of them, where a gRPC client's own headers on a call are a few
// hundred bytes.
const DefaultMaxHeaderBytes = 64 << 10

// Serve serves the rate limit and health services on lis until ctx ends, then shuts down
// gracefully: health turns NOT_SERVING (so that a load balancer's health check drains the replica;
// the health Watch streams on lis are sent it and then ended, so that they do not hold the
// shutdown for its grace), the listener closes, and calls in progress have up to grace (default 10s) to finish before their
// connections are cut (a grace of 0 or less means 10s); it returns once their handlers have, so a
// handler blocked in a call that does not end with its ctx (a Redis read, until its own deadline)
// holds Serve past grace until that call returns. StopServing cuts the grace short, or the serving
// itself. It returns nil after a shutdown that ctx or StopServing asked for, the listener's error
// otherwise, and an error for a nil lis. It does not Close s: a
// later Serve (on a new listener) turns health SERVING again. It is safe to call from several
// goroutines at once, on different listeners; they share the health status (see Register). Each
// connection may have DefaultMaxStreams calls in progress and send DefaultMaxHeaderBytes of
// headers a call, unless opts set grpc.MaxConcurrentStreams or grpc.MaxHeaderListSize: opts come
// after these defaults, and gRPC's later options win.
func (s *Server) Serve(ctx context.Context, lis net.Listener, k Keepalive, grace time.Duration, opts ...grpc.ServerOption) error {
	if lis == nil {
		return errors.New("rls: Serve: nil listener")
	}
	if grace <= 0 {
		grace = 10 * time.Second
	}
	// WaitForHandlers: a Stop (StopServing's, or the grace's end) returns only once the handlers
	// of the calls it cut have, as Serve promises.
	base := append(k.ServerOptions(), grpc.MaxConcurrentStreams(DefaultMaxStreams), grpc.MaxHeaderListSize(DefaultMaxHeaderBytes), grpc.WaitForHandlers(true))
	g := grpc.NewServer(append(base, opts...)...)
	draining, drain := context.WithCancel(context.Background())
	defer drain()
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, endingWatches{s.health, draining})
	s.track(g, true)
	defer s.track(g, false)
	s.setServing(true)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	select {
	case err := <-served:
		s.setServing(false) // nothing serves on lis any more
		g.Stop()
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	s.setServing(false)
	drain() // after NOT_SERVING, which each Watch then sends before it ends
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

// endingWatches is the health service Serve registers: the Server's, but a Watch ends (with the
// status the Server then has, NOT_SERVING for a name it serves) once draining is done. A Watch
// stream lasts until its client ends it, so the graceful shutdown that waits for every call would
// otherwise wait out its whole grace for each client that health-checks by watching (gRPC's
// client-side health checking), calls in progress or not.
type endingWatches struct {
	*health.Server
	draining context.Context
}

func (h endingWatches) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.draining, cancel)()
	ws := &watchStream{Health_WatchServer: stream, ctx: ctx}
	err := h.Server.Watch(req, ws)
	if h.draining.Err() == nil {
		return err // the client ended it
	}
	// The inner Watch may have seen the cancel before the NOT_SERVING update: send the status
	// now, unless it was the last sent, so that a watcher hears it before its stream ends.
	st, cerr := h.Server.Check(stream.Context(), req)
	if cerr == nil && stream.Context().Err() == nil && (!ws.sent || ws.last != st.GetStatus()) {
		if err := stream.Send(st); err != nil {
			return err
		}
	}
	return nil
}

// watchStream is a Watch stream whose Context is ctx, and which keeps the last status sent on it.
// Only the inner Watch's goroutine uses it.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	sent bool
	last healthpb.HealthCheckResponse_ServingStatus
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(r *healthpb.HealthCheckResponse) error {
	w.sent, w.last = true, r.GetStatus()
	return w.Health_WatchServer.Send(r)
}

// StopServing cuts off what every Serve in progress is serving, at once: their listeners close,
// their connections and the calls on them are cut (clients see UNAVAILABLE), and a Serve shutting
// down gracefully stops waiting for its grace period. It returns, and each Serve returns nil, once
// the handlers of the calls it cut have returned (a call blocked on Redis returns when its Redis
// calls do), the Serve's ctx ended or not. A Serve that begins later serves as usual. It does not
// Close s. Safe for concurrent use, with Serve too: it is what a second stop signal does in the
// slidelimit rls command.
func (s *Server) StopServing() {
	s.servingMu.Lock()
	gs := make([]*grpc.Server, 0, len(s.serving))
	for g := range s.serving {
		gs = append(gs, g)
	}
	s.servingMu.Unlock()
	for _, g := range gs {
		g.Stop()
	}
}

// track records that g serves (on) or no longer does, for StopServing.
func (s *Server) track(g *grpc.Server, on bool) {
	s.servingMu.Lock()
	defer s.servingMu.Unlock()
	if !on {
		delete(s.serving, g)
		return
	}
	if s.serving == nil {
		s.serving = map[*grpc.Server]bool{}
	}
	s.serving[g] = true
}

// setServing sets the health status of both names, unless s is closed (NOT_SERVING for good).
func (s *Server) setServing(on bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.st == nil {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if on {
		st = healthServing
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
}
