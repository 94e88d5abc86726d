package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/policy"
	"github.com/slidelimit/slidelimit/redisstore"
	"github.com/slidelimit/slidelimit/redisstore/batched"
	"github.com/slidelimit/slidelimit/rls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

const rlsSynopsis = "-config PATH [-listen ADDR] [-redis URL] [-redis-mode exact|batched] [-on-redis-error open|closed|local] [-redis-timeout D] [-redis-deny-max-age D] [-max-keys N] [-expected-keys N] [-metrics-listen ADDR] [-headers] [-reload-interval D] [-shutdown-timeout D] [-keepalive-time D] [-keepalive-timeout D] [-keepalive-min-ping-interval D] [-max-streams N] [-max-header-bytes N] [-max-detailed-series N] [-max-connection-age D] [-tls-cert FILE -tls-key FILE [-tls-client-ca FILE]]"

type rlsConfig struct {
	config, listen, metricsListen string
	tlsCert, tlsKey, tlsClientCA  string
	redisURL, redisMode, onError  string
	redisTimeout                  time.Duration
	denyMaxAge                    time.Duration
	maxKeys, expectedKeys         int
	maxStreams, maxHeaderBytes    int64
	maxDetailed                   int64
	headers                       bool
	reloadInterval, shutdown      time.Duration
	keepalive                     rls.Keepalive
}

func rlsFlags(stderr io.Writer) (*rlsConfig, *flag.FlagSet) {
	c := &rlsConfig{}
	fs := newFlagSet("rls", rlsSynopsis, stderr)
	fs.StringVar(&c.config, "config", "", "a YAML file, or a directory of them (one domain per file), in envoyproxy/ratelimit's format (required)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8081", "gRPC address to serve envoy.service.ratelimit.v3.RateLimitService and grpc.health.v1 on (port 0 picks a free one)")
	fs.StringVar(&c.redisURL, "redis", "", "decide on Redis at this URL (redis://host:port/db), so that every replica shares each limit; default: in process")
	fs.StringVar(&c.redisMode, "redis-mode", "exact", "with -redis: exact (one round trip per descriptor) or batched (quota leased from Redis in batches, decided in process; sliding-counter only)")
	fs.StringVar(&c.onError, "on-redis-error", "open", "with -redis, what a descriptor gets when Redis cannot decide: open (admit) or closed (refuse); with -redis-mode batched also local (the limit divided by the fleet size last heard from Redis; a replica started while Redis is away counts itself alone)")
	// The durations are read as the proxy reads them (a day unit, "add a unit" for a bare number).
	dur := func(d *time.Duration, name string, def time.Duration, usage string) {
		durationVar(fs, d, name, def, usage)
	}
	dur(&c.redisTimeout, "redis-timeout", redisstore.DefaultTimeout, "with -redis, the deadline of each call to Redis, a `duration` in [1ms, 1m]")
	dur(&c.denyMaxAge, "redis-deny-max-age", 0, "with -redis-mode exact: answer a descriptor Redis refused in process for at most this long (a `duration`, 0 or at least 1ms), so that a reset made elsewhere or a key Redis lost is seen within it (0: until its retry time)")
	fs.IntVar(&c.maxKeys, "max-keys", 0, "in process: keys each rate limit tracks at most; a descriptor with a new key beyond is answered OVER_LIMIT, and nothing is evicted (0: the engine's default, 2^26); not with -redis")
	fs.IntVar(&c.expectedKeys, "expected-keys", 0, "in process: size each rate limit's tables for this many keys at start, about 20 bytes each for millions, more each for fewer (twice that for limits above 2^21 a window), so that none grows on the way to them; at most the key cap; not with -redis (0: start empty and grow)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this HTTP address (default: no metrics listener)")
	fs.BoolVar(&c.headers, "headers", false, "return the draft-10 RateLimit and RateLimit-Policy fields as response headers to add")
	dur(&c.reloadInterval, "reload-interval", time.Second, "how often to check -config for edits (a `duration`; 0: never)")
	dur(&c.shutdown, "shutdown-timeout", 10*time.Second, "how long (a `duration`) calls in flight may take to finish after SIGTERM or SIGINT; a second signal cuts them off at once")
	dur(&c.keepalive.Time, "keepalive-time", time.Minute, "ping a client after its connection has been idle this long (a `duration`)")
	dur(&c.keepalive.Timeout, "keepalive-timeout", 20*time.Second, "close a connection whose ping is not answered within this (a `duration`)")
	dur(&c.keepalive.MinPingInterval, "keepalive-min-ping-interval", 10*time.Second, "the most often (a `duration`) a client may ping; keep it at or below Envoy's connection_keepalive interval")
	fs.Int64Var(&c.maxStreams, "max-streams", rls.DefaultMaxStreams, "calls (HTTP/2 streams) one connection may have in progress at once, so that a client that does not read its answers holds at most this many; gRPC clients wait for one to end and Envoy opens another connection, and a stream past it is refused")
	fs.Int64Var(&c.maxHeaderBytes, "max-header-bytes", rls.DefaultMaxHeaderBytes, "the most header bytes one call may send (each field's name and value, and 32 more), so that a client cannot hold gRPC's default of 16 MiB a call; a call that sends more is reset, and its connection's other calls go on (one field longer than this on its own closes the connection)")
	fs.Int64Var(&c.maxDetailed, "max-detailed-series", rls.DefaultMaxDetailedSeries, "request values of detailed_metric descriptors that get metrics of their own, over the process's life; a value not seen before past it is counted under its descriptor's config path (0: none)")
	dur(&c.keepalive.MaxConnectionAge, "max-connection-age", 0, "close connections after this long (a `duration`), so that clients spread over new replicas (0: never)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve gRPC over TLS with the PEM certificate chain in this `file` (with -tls-key); read again when it changes, for new connections")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the PEM private key `file` of -tls-cert")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "with -tls-cert: require each client to present a certificate signed by a CA in this PEM `file` (mutual TLS)")
	return c, fs
}

func rlsMain(args []string, _, stderr io.Writer) error {
	c, fs := rlsFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case c.config == "":
		return usageErr(fs, "-config is required")
	case c.reloadInterval < 0:
		return usageErr(fs, "-reload-interval %v: must be 0 (never) or positive, like 1s", typed(&c.reloadInterval))
	case c.shutdown <= 0:
		// rls.Serve reads 0 as its own default: refuse it rather than log a grace not given.
		return usageErr(fs, "-shutdown-timeout %v: must be positive, like 10s", typed(&c.shutdown))
	case c.keepalive.MaxConnectionAge < 0:
		return usageErr(fs, "-max-connection-age %v: must be 0 (never) or positive", typed(&c.keepalive.MaxConnectionAge))
	case c.maxStreams < 1 || c.maxStreams > math.MaxUint32:
		return usageErr(fs, "-max-streams %d: must be in [1, %d]", c.maxStreams, uint32(math.MaxUint32))
	case c.maxHeaderBytes < minHeaderBytes || c.maxHeaderBytes > math.MaxUint32:
		return usageErr(fs, "-max-header-bytes %d: must be in [%d, %d]", c.maxHeaderBytes, minHeaderBytes, uint32(math.MaxUint32))
	case c.maxDetailed < 0 || c.maxDetailed > math.MaxInt32:
		return usageErr(fs, "-max-detailed-series %d: must be in [0, %d]", c.maxDetailed, math.MaxInt32)
	}
	if err := checkRedisTimeout(&c.redisTimeout); err != nil {
		// Checked here so that the flag is named (and the exit is 2) rather than blamed on the
		// first rule of the config that needs Redis.
		return usageErr(fs, "%v", err)
	}
	if err := checkDenyMaxAge(&c.denyMaxAge, c.redisMode); err != nil {
		return usageErr(fs, "%v", err)
	}
	// gRPC reads a keepalive of 0 as its own default, not this flag's, and a negative one as
	// nothing sensible.
	for _, k := range []struct {
		flag string
		d    *time.Duration
	}{{"-keepalive-time", &c.keepalive.Time}, {"-keepalive-timeout", &c.keepalive.Timeout}, {"-keepalive-min-ping-interval", &c.keepalive.MinPingInterval}} {
		if *k.d <= 0 {
			return usageErr(fs, "%s %v: must be positive", k.flag, typed(k.d))
		}
	}
	if err := checkKeyCounts(c.maxKeys, c.expectedKeys); err != nil {
		return usageErr(fs, "%v", err)
	}
	// Redis keeps the counts, and a key there expires with its window: no in-process table to
	// cap or size.
	switch {
	case c.maxKeys > 0 && c.redisURL != "":
		return usageErr(fs, "-max-keys %d: caps in-process limits, and with -redis there are none", c.maxKeys)
	case c.expectedKeys > 0 && c.redisURL != "":
		return usageErr(fs, "-expected-keys %d: sizes in-process limits, and with -redis there are none", c.expectedKeys)
	}
	switch {
	case c.redisMode != "exact" && c.redisMode != "batched":
		return usageErr(fs, "-redis-mode %q: want exact or batched", c.redisMode)
	case c.redisMode == "batched" && c.redisURL == "":
		return usageErr(fs, "-redis-mode batched: needs -redis URL")
	}
	onError, err := slidelimit.ParseFailureMode(c.onError)
	if err != nil || (onError == slidelimit.FailLocal && c.redisMode != "batched") {
		return usageErr(fs, "-on-redis-error %q: want open or closed (or local, with -redis-mode batched)", c.onError)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := checkRedisOnly(set, c.redisURL, redisFlag{"redis-mode", c.redisMode}, redisFlag{"on-redis-error", c.onError},
		redisFlag{"redis-timeout", c.redisTimeout}, redisFlag{"redis-deny-max-age", c.denyMaxAge}); err != nil {
		return usageErr(fs, "%v", err)
	}
	if err := checkListenAddrs(c.listen, c.metricsListen); err != nil {
		return usageErr(fs, "%v", err)
	}
	switch {
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return usageErr(fs, "-tls-cert and -tls-key go together: give both, or neither for plaintext gRPC")
	case c.tlsClientCA != "" && c.tlsCert == "":
		return usageErr(fs, "-tls-client-ca %s: needs -tls-cert and -tls-key (mutual TLS is TLS first)", c.tlsClientCA)
	}
	logger := log.New(lineWriter{stderr}, "slidelimit rls: ", log.LstdFlags)
	var creds []grpc.ServerOption
	transport := "plaintext gRPC"
	if c.tlsCert != "" {
		// gRPC clients require the server to choose HTTP/2 by ALPN.
		files, err := newTLSFiles(c.tlsCert, c.tlsKey, c.tlsClientCA, []string{"h2"}, func(warning bool, msg string) {
			if warning {
				msg = "warning: " + msg
			}
			logger.Print(msg)
		})
		if err != nil {
			return usageErr(fs, "%v", err)
		}
		creds = append(creds, grpc.Creds(credentials.NewTLS(files.serverConfig())))
		transport = "gRPC over TLS, " + describeCert(files.cfg)
		if c.tlsClientCA != "" {
			transport += ", client certificates required"
		}
	}
	// The libraries' own lines (redisstore's, when its breaker opens) go to log/slog's default
	// logger, which writes through the standard one: prefixed like every other line.
	log.SetOutput(stderr)
	log.SetPrefix("slidelimit rls: ")
	log.SetFlags(log.LstdFlags)
	if c.redisURL != "" {
		forwardRedisLog(func(msg string, suppressed int) {
			logger.Printf("warning: redis client: %s (suppressed=%d)", msg, suppressed)
		}, c.redisURL)
	}

	// Caught before the config is read and the limiters are built, which take a while for a large
	// config (and Redis's first answer up to a second); a second signal cuts off the calls in
	// flight (below).
	ctx, stop, stopSignals, releaseSignals := stopOnSignal()
	defer releaseSignals()
	// SIGHUP reloads -config at once, as in "slidelimit proxy", whatever -reload-interval; one
	// that comes during start-up is held until the server runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := rls.LoadConfig(c.config)
	if err != nil {
		return fmt.Errorf("-config: %w", err)
	}
	opts := []rls.Option{rls.WithHeaders(c.headers), rls.WithLogger(logger), rls.WithMaxDetailedSeries(int(c.maxDetailed))}
	describe := "in process"
	// The first limiter whose -expected-keys tables did not fit: the server reports its error as
	// the config's (file, line, descriptor), but then the flag's value is what is wrong.
	var keysErr atomic.Pointer[expectedKeysError]
	if c.redisURL == "" && (c.maxKeys > 0 || c.expectedKeys > 0) {
		// The server's default backend, with the two options.
		eopts := []engine.Option{engine.WithShards(rls.DefaultShards)}
		if c.maxKeys > 0 {
			eopts = append(eopts, engine.WithMaxKeys(c.maxKeys))
		}
		opts = append(opts, rls.WithBackend(rls.BackendFunc(func(_ string, p policy.Policy) (slidelimit.Limiter, error) {
			eng, err := newPresized(p, c.expectedKeys, eopts...)
			if err != nil {
				var ek *expectedKeysError
				if errors.As(err, &ek) {
					ek.each = "each rate limit of the config"
					keysErr.CompareAndSwap(nil, ek)
				}
				return nil, err
			}
			return eng.AsLimiter(), nil
		})))
		describe += fmt.Sprintf(" (each rate limit: at most %d keys, tables for %d at start)", cmp.Or(c.maxKeys, engine.DefaultMaxKeys), c.expectedKeys)
	}
	if c.redisMode == "batched" {
		// Checked before Redis is dialled (its first answer can take a second), as the proxy
		// checks -policy: batched leases sliding-counter quota only. A server whose limiters only
		// check the policy reports a mismatch as the real one would, naming file and line.
		probe, err := rls.NewServer(cfg, rls.WithBackend(rls.BackendFunc(func(_ string, p policy.Policy) (slidelimit.Limiter, error) {
			if _, ok := p.(policy.SlidingCounter); !ok {
				return nil, fmt.Errorf("-redis-mode batched: policy %q is not available in batched mode; use sliding-counter, or -redis-mode exact", p.ID())
			}
			return policyOnly{}, nil
		})))
		if err != nil {
			return fmt.Errorf("-config: %w", err)
		}
		probe.Close()
	}
	if c.redisURL != "" {
		// NewClient understands cluster and sentinel URLs too; its errors never show the password.
		client, err := redisstore.NewClient(c.redisURL)
		if err != nil {
			return usageErr(fs, "-redis: %v", err)
		}
		defer client.Close()
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := client.Ping(pctx).Err(); err != nil && ctx.Err() == nil {
			logger.Printf("warning: Redis at %s does not answer (%v); descriptors are decided %s until it does", redactURL(c.redisURL), err, onError)
		}
		cancel()
		if c.redisMode == "batched" {
			opts = append(opts, rls.WithBackend(rls.BackendFunc(func(name string, p policy.Policy) (slidelimit.Limiter, error) {
				bl, err := batched.New(client, name, p, batched.WithTimeout(c.redisTimeout), batched.WithOfflineMode(onError))
				if err != nil {
					return nil, err
				}
				return offlineAs{bl, onError}, nil
			})))
		} else {
			opts = append(opts, rls.WithBackend(rls.RedisBackend(client, redisstore.WithOnFailure(onError), redisstore.WithTimeout(c.redisTimeout), redisstore.WithDenyCacheMaxAge(c.denyMaxAge))))
		}
		describe = "on Redis " + redactURL(c.redisURL) + " (" + c.redisMode + ")"
	}
	srv, err := rls.NewServer(cfg, opts...)
	if err != nil {
		if ek := keysErr.Load(); ek != nil {
			return usageErr(fs, "%v", ek)
		}
		return fmt.Errorf("-config: %w", err)
	}
	// Closed on the way out, unless the shutdown below has begun closing it: a second Close
	// would wait for that one, which a second stop signal has stopped waiting for.
	closing := false
	defer func() {
		if !closing {
			srv.Close()
		}
	}()
	// Once the shutdown has begun (a stop signal, or the metrics listener failing), a stop signal
	// cuts off the calls in flight at once.
	second, returned := make(chan struct{}), make(chan struct{})
	defer close(returned)
	go func() {
		<-ctx.Done() // on return at the latest, by releaseSignals
		select {
		case <-stopSignals:
			logger.Printf("a second stop signal: cutting off the calls in flight")
			srv.StopServing()
			close(second)
		case <-returned:
		}
	}()
	if ctx.Err() != nil {
		logger.Printf("stopped before listening")
		return nil
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("-listen %q: %v", c.listen, err)
	}

	var ms *http.Server
	msErr := make(chan error, 1)
	if c.metricsListen != "" {
		mln, err := net.Listen("tcp", c.metricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("-metrics-listen %q: %v", c.metricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", srv.MetricsHandler())
		ms = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: logger}
		go func() { msErr <- ms.Serve(mln) }()
		logger.Printf("metrics on http://%s/metrics", mln.Addr())
	}
	watched := make(chan struct{})
	if c.reloadInterval > 0 {
		go func() { srv.Watch(ctx, c.config, c.reloadInterval); close(watched) }()
	} else {
		close(watched)
	}
	hupDone := make(chan struct{})
	go func() {
		defer close(hupDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = srv.ReloadFile(c.config) // logged and counted; an error keeps the last good config
			}
		}
	}()
	logger.Printf("listening on %s, domains %s, deciding %s; %s", ln.Addr(), strings.Join(cfg.Domains(), ", "), describe, transport)
	said := make(chan struct{}) // closed once that line is written, or will not be
	go func() {
		defer close(said)
		// Said when the shutdown begins, not once it is over: calls in flight may take up to
		// -shutdown-timeout, and a log that said nothing meanwhile looked hung.
		select {
		case <-ctx.Done():
			select {
			case <-returned:
			default:
				logger.Printf("shutting down: calls in flight have up to %v to finish", c.shutdown)
			}
		case <-returned:
		}
	}()

	serveErr := make(chan error, 1)
	go func() {
		serveErr <- srv.Serve(ctx, ln, c.keepalive, c.shutdown, append(creds, grpc.MaxConcurrentStreams(uint32(c.maxStreams)), grpc.MaxHeaderListSize(uint32(c.maxHeaderBytes)))...)
	}()
	var runErr error
	select {
	case err := <-msErr:
		runErr = fmt.Errorf("metrics listener: %w", err)
		stop()
		<-serveErr
	case err := <-serveErr:
		runErr = err
		if ctx.Err() == nil && err != nil {
			runErr = fmt.Errorf("serving: %w", err)
		}
	}
	stop()
	<-watched
	<-hupDone
	<-said // a goroutine scheduled late wrote "shutting down" after "stopped"
	if ms != nil {
		sctx, cancel := context.WithTimeout(context.Background(), c.shutdown)
		if err := ms.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ms.Close()
		}
		cancel()
	}
	// A batched limiter's sync still waiting on a hung Redis logs its failure when it ends: it
	// ends in here, so that "stopped" stays the last line.
	closing = true
	if !closeBounded(func() { srv.Close() }, c.redisURL != "", c.redisTimeout, second) {
		logger.Printf("warning: Redis did not answer within twice -redis-timeout %v while the limiters were closed: what they held stays counted until its window ends", c.redisTimeout)
	}
	if runErr == nil {
		logger.Printf("stopped")
	}
	return runErr
}

// minHeaderBytes is the least -max-header-bytes: room for the headers every gRPC call carries (its
// method, path, authority, content type, deadline, user agent) several times over, with tracing
// headers beside them, so that the flag cannot refuse every call.
const minHeaderBytes = 4096

// policyOnly is the limiter of a server built only to check a config's policies: it is never
// asked to decide.
type policyOnly struct{}

func (policyOnly) Take(context.Context, string, int64) (slidelimit.Decision, error) {
	return slidelimit.Decision{}, errors.New("policyOnly: not a limiter")
}
